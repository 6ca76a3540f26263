#!/usr/bin/env bash
# gotest.sh ARGS... runs `go test ARGS...`, keeps the whole output in
# $TEST_LOG (default .test-output/go-test.log) and, when it fails, prints a
# digest last: CI shows only the tail of a run, and a test binary that
# crashes (a UCX assertion aborts the process) ends its output with pages of
# goroutine stacks and registers that push the cause out of sight.
#
# The digest: the failing tests and packages, panics, fatal errors, data
# races, UCX assertion and signal lines, and for a crashed binary the test
# functions that were on its stacks.
set -uo pipefail
log=${TEST_LOG:-.test-output/go-test.log}
mkdir -p "$(dirname "$log")"
# Every goroutine in a crash dump, so the digest can name the tests that
# were running when a C library aborted the process.
export GOTRACEBACK=${GOTRACEBACK:-all}
"${GO:-go}" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && exit 0

echo
echo "==== gotest: go test exited $rc; digest of $log ===="
grep -nE -- '--- FAIL|^FAIL|^panic:|^fatal error:|WARNING: DATA RACE|Assertion .* failed|\] *Caught signal|^SIG[A-Z]+:|^signal: |panic: test timed out|^[[:space:]]+[a-z_]+\.go:[0-9]+: ' "$log" | head -80
crashed=$(grep -oE '^[^ (]+\.Test[A-Za-z0-9_]+' "$log" | sed 's|^.*/||' | sort | uniq -c | sort -rn | head -20)
if [ -n "$crashed" ]; then
  echo "---- test functions on the stacks of crash or timeout dumps (count of frames):"
  echo "$crashed"
fi
echo "==== end of digest ===="
exit "$rc"
