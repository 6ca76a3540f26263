# bench-rdmo runs `rdmo bench` (target, RDMO worker and initiators as
# processes) in the DPU and shared-memory topologies, alternating with
# ucx_perftest, and prints the figures docs/BENCHMARKS.md reports (as ratios to
# baselines of the same run). DURATION, ROUNDS, RSS_TIME and OUT tune it.
.PHONY: bench-rdmo
bench-rdmo: deps
	GO=$(GO) ./cmd/rdmo/internal/bench/results.sh
