# test-under-load runs the CI test command (`make test`, CI=true) with a CPU
# hog on every core, bounded in time and stopped on every exit path, so a
# test that only passes on a quiet machine fails here rather than in CI.
# LOAD_RUNS=5 repeats the suite (stopping at the first red run); LOAD_HOGS
# and LOAD_MAX tune the hogs (see scripts/test-under-load.sh).
.PHONY: test-under-load
test-under-load: deps
	MAKE="$(MAKE)" ./scripts/test-under-load.sh
