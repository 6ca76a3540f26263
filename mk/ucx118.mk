# A second UCX in the test matrix: the UCX-facing tests run against Debian 13
# "trixie"'s UCX 1.18 in a cached chroot (scripts/ucx118.sh says how), besides
# the system's UCX 1.13 that `make test` uses. Needs root and a Debian mirror;
# fails, never skips, when it cannot run.
#   make test-ucx-1.18
#   make test-ucx-1.18 UCX118_ROOT=/some/dir   (default /var/cache/rdmo/trixie-ucx)
#   make test-ucx-1.18 RACE=1                  (with the race detector; CI runs without)
#
# CI time it adds (2026-11-24, 2 vCPU shared with other jobs): building the
# root once ~50 s; the package list below 681 s with -race; the e2e seed
# flow on top, from a cold build cache in the root, did not finish within
# 10 minutes on that loaded machine (it builds bin/rdmo and the plugins with
# -race inside): budget 15-20 minutes for the whole target.
#
# The packages it tests, in one place. Patterns, so packages moving inside
# these trees stay covered; the e2e package is run for the seed flow only.
UCX118_PKGS ?= ./ucp/... ./dpu/... ./rdmo/... ./host/...
UCX118_E2E  ?= ^TestSeedFlow$$

.PHONY: test-ucx-1.18

test-ucx-1.18:
	UCX118_PKGS='$(UCX118_PKGS)' UCX118_E2E='$(UCX118_E2E)' UCX118_TESTFLAGS='$(if $(RACE),-race)' \
	  RDMO_UCP_CHECK_THREADS=1 ./scripts/ucx118.sh
