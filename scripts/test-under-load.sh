#!/usr/bin/env bash
# test-under-load.sh runs the CI test command (`make test` with CI=true, as
# .ci/run does) while a CPU hog spins on every core, the way CI's shared
# machine is busy with other work. A flaky test shows here, not in CI.
#
#   ./scripts/test-under-load.sh      # or: make test-under-load
#   LOAD_RUNS=5 ./scripts/test-under-load.sh
#
# LOAD_HOGS   hogs to run (default: one per core, nproc)
# LOAD_RUNS   how many times to run the suite (default 1); stops at the first red run
# LOAD_MAX    upper bound on each hog's life (default 20 minutes per run), so
#             a hog outlives this script by no more than that even if the
#             script is SIGKILLed
# Every exit path (success, failure, ^C, TERM) stops the hogs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

HOGS="${LOAD_HOGS:-$(nproc)}"
RUNS="${LOAD_RUNS:-1}"
MAX="${LOAD_MAX:-$((RUNS * 20))m}"
MAKE="${MAKE:-make}"

hogs=()
stop_hogs() {
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${hogs[@]}"; do wait "$p" 2>/dev/null; done
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for _ in $(seq "$HOGS"); do
  timeout "$MAX" sh -c 'while :; do :; done' &
  hogs+=("$!")
done
echo "test-under-load: $HOGS CPU hogs running (pids ${hogs[*]}), each for at most $MAX"

for run in $(seq "$RUNS"); do
  start=$(date +%s)
  echo "test-under-load: run $run/$RUNS: CI=true $MAKE test"
  if ! CI=true "$MAKE" --no-print-directory test; then
    echo "test-under-load: run $run/$RUNS RED after $(( $(date +%s) - start ))s" >&2
    exit 1
  fi
  echo "test-under-load: run $run/$RUNS green in $(( $(date +%s) - start ))s (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
done
echo "test-under-load: $RUNS/$RUNS runs green"
