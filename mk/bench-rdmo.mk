# bench-rdmo runs `rdmo bench` (target, RDMO worker and initiators as
# processes) in the DPU and shared-memory topologies, alternating with
# ucx_perftest, and prints the figures docs/BENCHMARKS.md reports (as ratios to
# baselines of the same run). DURATION, ROUNDS, RSS_TIME and OUT tune it.
.PHONY: bench-rdmo
bench-rdmo: deps
	GO=$(GO) ./cmd/rdmo/internal/bench/results.sh

# bench-compare builds BASE (a git revision) and the working tree and runs
# them alternately (A B A B ...) on the workload row, 64 B and 64 KiB appends,
# flush/idle and chase/4, then prints the comparison with benchstat
# (docs/benchmarks/compare.md). COUNT, DURATION, TOPOLOGY and OUT tune it.
.PHONY: bench-compare
bench-compare: deps
	GO=$(GO) BASE=$(BASE) ./scripts/bench-compare.sh
