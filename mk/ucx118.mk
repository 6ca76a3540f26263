# A second UCX in the test matrix: the UCX-facing tests run against Debian 13
# "trixie"'s UCX 1.18 in a cached chroot (scripts/ucx118.sh says how), besides
# the system's UCX 1.13 that `make test` uses. Needs root and a Debian mirror;
# fails, never skips, when it cannot run.
#   make test-ucx-1.18
#   make test-ucx-1.18 UCX118_ROOT=/some/dir   (default /var/cache/rdmo/trixie-ucx)
#   make test-ucx-1.18 RACE=1                  (with the race detector; CI runs without)
#   make bench-ucx-1.18                        (`make bench` inside the root, against 1.18)
#
# CI time it adds (2026-11-24, 2 vCPU shared with other jobs): building the
# root once ~50 s; the package list and the e2e seed flow without -race:
# 48 s of test time, about 4 minutes with the builds inside the root (681 s
# for the package list alone with -race, RACE=1).
#
# The packages it tests, in one place. Patterns, so packages moving inside
# these trees stay covered; the e2e package is run for the seed flow only.
UCX118_PKGS ?= ./ucp/... ./dpu/... ./rdmo/... ./host/...
UCX118_E2E  ?= ^TestSeedFlow$$

.PHONY: test-ucx-1.18 bench-ucx-1.18

test-ucx-1.18:
	UCX118_PKGS='$(UCX118_PKGS)' UCX118_E2E='$(UCX118_E2E)' UCX118_TESTFLAGS='$(if $(RACE),-race)' \
	  RDMO_UCP_CHECK_THREADS=1 ./scripts/ucx118.sh

# bench-ucx-1.18 runs `make bench` itself inside the root (make is in the
# root's package list), so both UCX versions get the same benchmark: the Go
# AM rate alternating with that UCX's own ucx_perftest (trixie's ucx-utils),
# then the Go benchmarks. ROUNDS and BENCHTIME pass through, and so does
# UCX_* from the environment; a short form (a minute or two once the root's
# build cache is warm): make bench-ucx-1.18 ROUNDS=1 BENCHTIME=1x.
# Not in CI: speed is read from docs/BENCHMARKS.md (goal table) and
# docs/benchmarks/ucx-limits.md ("UCX 1.13 and 1.18").
bench-ucx-1.18:
	./scripts/ucx118.sh -- make bench $(if $(ROUNDS),ROUNDS=$(ROUNDS)) BENCHTIME=$(BENCHTIME)
