# bench-rdmo runs `rdmo bench` (target, RDMO worker and initiators as
# processes) in the DPU and shared-memory topologies, alternating with
# ucx_perftest, and prints the figures docs/BENCHMARKS.md reports (as ratios to
# baselines of the same run). DURATION, ROUNDS, RSS_TIME and OUT tune it.
.PHONY: bench-rdmo
bench-rdmo: deps
	GO=$(GO) ./cmd/rdmo/internal/bench/results.sh

# bench-plugins builds bin/rdmo and, into bin/plugins (where `bin/rdmo bench`
# looks by default, --plugin-path), the op pack's fetch-add as a go-plugin
# binary and as a WebAssembly module, for the rows of the handler forms:
# `bin/rdmo bench --topology dpu --modes fetch-add,forms`.
.PHONY: bench-plugins
bench-plugins: deps
	mkdir -p bin/plugins
	$(GO) build -o bin/rdmo ./cmd/rdmo
	$(GO) build -o bin/plugins/rdmo-plugin-fetch-add ./plugins/ops/cmd/rdmo-plugin-fetch-add
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 $(GO) build -buildmode=c-shared -o bin/plugins/rdmo-plugin-fetch-add.wasm ./plugins/ops/cmd/rdmo-plugin-fetch-add-wasm

# bench-compare builds BASE (a git revision) and the working tree and runs
# them alternately (A B A B ...) on the workload row, 64 B and 64 KiB appends,
# flush/idle and chase/4, then prints the comparison with benchstat
# (docs/benchmarks/compare.md). COUNT, DURATION, TOPOLOGY and OUT tune it.
.PHONY: bench-compare
bench-compare: deps
	GO=$(GO) BASE=$(BASE) ./scripts/bench-compare.sh
