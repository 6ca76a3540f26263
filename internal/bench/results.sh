#!/usr/bin/env bash
# Produces the figures of internal/bench/RESULTS.md (make bench-rdmo). Every figure is
# a ratio to a baseline measured in the same run: rows of one `rdmo bench`
# are interleaved round by round, and ucx_perftest alternates with it.
#
#   DURATION  measured time per row           (default 5s)
#   ROUNDS    perftest/rdmo alternations       (default 3)
#   RSS_TIME  length of the RSS run            (default 60s)
#   OUT       where the JSON, logs, plot and profiles go (default /tmp/rdmo-bench)
# Needs jq and ucx_perftest (ucx-utils).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/rdmo-bench}
dur=${DURATION:-5s}
rounds=${ROUNDS:-3}
rss_time=${RSS_TIME:-60s}
mkdir -p "$out"
go build -o "$out/rdmo" ./cmd/rdmo
rdmo="$out/rdmo"
row() { # file mode field
  jq -r --arg m "$2" ".rows[] | select(.mode==\$m) | $3" "$1"
}

echo "== 1. DPU topology, 64-byte operations, every row"
"$rdmo" bench --topology dpu --size 64 --duration "$dur" --json="$out/dpu-64.json" \
  --cpuprofile "$out/prof-dpu" 2>"$out/dpu-64.log" | tee "$out/dpu-64.txt"

echo "== 2. shared memory, 64-byte operations, every row"
"$rdmo" bench --topology shm --size 64 --duration "$dur" --json="$out/shm-64.json" \
  --cpuprofile "$out/prof-shm" 2>"$out/shm-64.log" | tee "$out/shm-64.txt"

echo "== 3. shared memory: rdmo-append vs ucx_perftest -t ucp_am_bw -s 64, alternating"
printf '%-6s %14s %14s %14s %10s %10s\n' round perftest_msg/s rdmo_owned/s raw_am/s owned/pt raw/pt
ratios=()
for r in $(seq "$rounds"); do
  pt=$(scripts/perftest-am.sh 64)
  j="$out/shm-pt-$r.json"
  "$rdmo" bench --topology shm --size 64 --duration "$dur" --modes raw-am,rdmo-append/owned \
    --json="$j" >"$out/shm-pt-$r.txt" 2>"$out/shm-pt-$r.log"
  own=$(row "$j" rdmo-append/owned .rate)
  raw=$(row "$j" raw-am .rate)
  ratio=$(awk -v a="$own" -v b="$pt" 'BEGIN{printf "%.3f", a/b}')
  rraw=$(awk -v a="$raw" -v b="$pt" 'BEGIN{printf "%.3f", a/b}')
  ratios+=("$ratio")
  printf '%-6s %14.0f %14.0f %14.0f %10s %10s\n' "$r" "$pt" "$own" "$raw" "$ratio" "$rraw"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
echo "median rdmo-append/owned / ucx_perftest ucp_am_bw (64 B, shm): $median  (goal >= 0.60)"

echo "== 4. worker RSS over a $rss_time saturating rdmo-append run (shm)"
"$rdmo" bench --topology shm --size 64 --modes rdmo-append/owned --duration "$rss_time" \
  --json="$out/rss.json" 2>"$out/rss.log" | tee "$out/rss.txt" | tail -n 4

echo "== 5. rate by message size (DPU topology)"
"$rdmo" bench --topology dpu --size 8,64,512,4096 --duration 2s \
  --modes baselines,rdmo-append,scatter/4 --json="$out/sizes.json" --plot "$out/sizes.svg" \
  2>"$out/sizes.log" | tee "$out/sizes.txt" | tail -n 40

echo "results in $out"
