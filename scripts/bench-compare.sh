#!/usr/bin/env bash
# bench-compare.sh compares the working tree with a base revision on the rows
# a data-path change must not slow down (docs/benchmarks/compare.md): it
# builds both `rdmo` binaries, runs them alternately (A B B A A B ...) on the
# workload row, 64 B and 64 KiB appends (rdmo-append/owned), flush/idle and
# chase/4, and prints the comparison with benchstat.
#
#   BASE=<rev> ./scripts/bench-compare.sh          # or: make bench-compare BASE=<rev>
#   COUNT=10 DURATION=5s TOPOLOGY=shm BASE=main ./scripts/bench-compare.sh
#
# COUNT is the runs of each build (default 6: benchstat needs 6 for a
# confidence interval), DURATION the measured time per
# row and run (default 3s), TOPOLOGY dpu (default) or shm, DEMO_OPS the
# operations of a demo pair (default 100000). OUT keeps the raw results in a
# directory (default: a temporary one, removed). A base without the workload
# row (older than `rdmo bench --modes workload`) is compared on the demo's own
# server and client pair instead (`BenchmarkDemo`, both builds alike).
set -euo pipefail

cd "$(dirname "$0")/.." || exit 1
GO="${GO:-go}"
BASE="${BASE:-${1:-}}"
COUNT="${COUNT:-6}"
DURATION="${DURATION:-3s}"
TOPOLOGY="${TOPOLOGY:-dpu}"
DEMO_OPS="${DEMO_OPS:-100000}"
# The benchstat the module proxy serves (golang.org/x/perf has no tags).
BENCHSTAT_VERSION="${BENCHSTAT_VERSION:-v0.0.0-20260908200009-22c9c6c9d4da}"

if [ -z "$BASE" ]; then
  echo "bench-compare: name the base revision: make bench-compare BASE=<rev>" >&2
  exit 2
fi
base_rev="$(git rev-parse --verify --short=12 "$BASE^{commit}")" || {
  echo "bench-compare: $BASE is not a revision of this repository" >&2
  exit 2
}

# benchstat, installed once into bin/.
BENCHSTAT="$PWD/bin/benchstat"
if [ ! -x "$BENCHSTAT" ]; then
  echo "bench-compare: installing benchstat into bin/"
  mkdir -p bin
  GOBIN="$PWD/bin" "$GO" install "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION"
fi

tmp="$(mktemp -d)"
wt="$tmp/base-tree"
cleanup() {
  git worktree remove --force "$wt" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
out="${OUT:-$tmp/results}"
mkdir -p "$out"

echo "bench-compare: building $base_rev (A) and the working tree (B)"
git worktree add --quiet --detach "$wt" "$base_rev"
(cd "$wt" && CGO_ENABLED=1 "$GO" build -o "$tmp/rdmo-A" ./cmd/rdmo)
CGO_ENABLED=1 "$GO" build -o "$tmp/rdmo-B" ./cmd/rdmo
conv="$tmp/rdmo-B" # reads any build's JSON results (--results-from)

has_workload() { "$1" bench --help 2>&1 | grep -q 'workload'; }
demo_pair=""
if ! has_workload "$tmp/rdmo-A" || ! has_workload "$tmp/rdmo-B"; then
  demo_pair=1
  echo "bench-compare: $base_rev has no workload row: the workload is compared on the demo's server and client ($DEMO_OPS ops)"
fi

# bench_rows BIN NAME: one run of BIN's rows, appended to $out/NAME.txt.
bench_rows() {
  local bin="$1" name="$2" json="$tmp/run.json"
  local -a sets=("rdmo-append/owned:64,65536" "flush/idle,chase/4:64")
  [ -z "$demo_pair" ] && sets+=("workload:64")
  for set in "${sets[@]}"; do
    "$bin" bench --topology "$TOPOLOGY" --modes "${set%%:*}" --size "${set##*:}" \
      --duration "$DURATION" --results "$json" >>"$out/$name.log" 2>&1 || {
      echo "bench-compare: $name run failed (see $out/$name.log):" >&2
      tail -n 5 "$out/$name.log" >&2
      return 1
    }
    "$conv" bench --results-from "$json" --results-format gobench | grep '^Benchmark' >>"$out/$name.txt"
  done
}

# demo_run BIN NAME: the demo's server and client (as `make demo` runs
# them), as one benchmark line: ns/op from the client's rate, its flush p50.
demo_run() {
  local bin="$1" name="$2" port
  port=$((20000 + RANDOM % 40000))
  "$bin" -m server --oob-port "$port" --ops "$DEMO_OPS" >"$tmp/server.out" 2>>"$out/$name.log" &
  local spid=$!
  "$bin" -m client -s 127.0.0.1 --oob-port "$port" >"$tmp/client.out" 2>>"$out/$name.log" || true
  wait "$spid" || true
  grep -q "verification PASSED" "$tmp/client.out" || {
    echo "bench-compare: $name demo pair failed:" >&2
    cat "$tmp/client.out" >&2
    return 1
  }
  awk -v ops="$DEMO_OPS" '
    function ns(v) {
      if (v ~ /ms$/) return v * 1e6; if (v ~ /µs$/ || v ~ /us$/) return v * 1e3
      if (v ~ /ns$/) return v * 1; if (v ~ /s$/) return v * 1e9; return v
    }
    /^  rate/ { for (i = 1; i <= NF; i++) if ($i == "kops/s,") kops = $(i - 1) }
    /^  flushes/ { for (i = 1; i <= NF; i++) if ($i == "p50") p50 = $(i + 1); sub(/,$/, "", p50) }
    END { if (kops > 0) printf "BenchmarkDemo/ops=%d 1 %.1f ns/op %d p50-ns\n", ops, 1e6 / kops, ns(p50) }
  ' "$tmp/client.out" >>"$out/$name.txt"
}

echo "bench-compare: $COUNT alternated runs of each build, topology $TOPOLOGY, $DURATION per row; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Which build runs first alternates too: the second run of a pair can be
# slower whatever it runs (docs/benchmarks/compare.md).
for i in $(seq 1 "$COUNT"); do
  order="A B"
  [ $((i % 2)) = 0 ] && order="B A"
  for name in $order; do
    echo "  run $i/$COUNT: $name"
    bench_rows "$tmp/rdmo-$name" "$name"
    [ -n "$demo_pair" ] && demo_run "$tmp/rdmo-$name" "$name"
  done
done
echo "bench-compare: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "A = $base_rev, B = the working tree ($(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes'))"
cd "$out" && "$BENCHSTAT" A=A.txt B=B.txt
