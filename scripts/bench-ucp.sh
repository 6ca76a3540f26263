#!/usr/bin/env bash
# Go AM message rate against ucx_perftest's ucp_am_bw, measured alternately
# in one run (the machines are shared and noisy: only ratios taken side by
# side mean anything). Prints one line per round and the median ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
export UCX_TLS=${UCX_TLS:-shm,self}
# A directory of its own: runs from other worktrees (or make bench-ucx-1.18
# next to make bench) would otherwise overwrite one binary.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/ucp.bench.test" ./ucp >/dev/null
ratios=()
# Which UCX: make bench-ucx-1.18 runs this script against another one.
echo "UCX $(pkg-config --modversion ucx), UCX_TLS=$UCX_TLS${UCX_PROTO_ENABLE:+, UCX_PROTO_ENABLE=$UCX_PROTO_ENABLE}"
printf '%-6s %14s %14s %8s\n' round perftest_msg/s go_msg/s ratio
for r in $(seq "$rounds"); do
  pt=$(scripts/perftest-am.sh 64)
  gor=$(UCP_BENCH_CHILD_CPU=0 taskset -c 1 "$tmp/ucp.bench.test" -test.run '^$' -test.bench 'AMRate64$' -test.benchtime 2000000x \
        | awk '/msg\/s/ {for (i=1;i<=NF;i++) if ($(i+1)=="msg/s") print $i}')
  ratio=$(awk -v a="$gor" -v b="$pt" 'BEGIN{printf "%.2f", a/b}')
  ratios+=("$ratio")
  printf '%-6s %14.0f %14.0f %8s\n' "$r" "$pt" "$gor" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
echo "median ratio go/perftest (64 B AM, $UCX_TLS): $median  (goal >= 0.70)"
