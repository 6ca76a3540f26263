#!/usr/bin/env bash
# Go large active messages (BenchmarkAMBandwidth: rendezvous payloads taken
# into the receiver's memory) against ucx_perftest -t ucp_am_bw, measured
# alternately in one run per size and transport (the machines are shared
# and noisy: only ratios taken side by side mean anything). Both pin their
# receiver to CPU 0 and their sender to CPU 1.
# Usage: ROUNDS=3 SIZES="65536 1048576" TLS="shm,self tcp,self" scripts/bench-ucp-large.sh
# Prints one line per round and the median ratio per size and transport.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
sizes=${SIZES:-65536 1048576}
tlss=${TLS:-shm,self tcp,self}
bytes=${BYTES:-1073741824} # per measurement
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/ucp.test" ./ucp >/dev/null
bin=${UCP_TEST_BINARY:-$tmp/ucp.test}

perftest() { # size iters -> MB/s (perftest's average after its warm-up)
  local port=$(( 20000 + RANDOM % 20000 )) out srv
  taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
  srv=$!
  for _ in $(seq 100); do
    if ss -ltn 2>/dev/null | grep -q ":$port "; then break; fi
    sleep 0.05
  done
  out=$(taskset -c 1 ucx_perftest localhost -p "$port" -t ucp_am_bw -s "$1" -n "$2" -w 32 2>&1 || true)
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  # Final: iters p50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall
  awk -v s="$1" '/^Final:/ {printf "%.0f", $8*s/1e6}' <<<"$out"
}

gobench() { # size iters -> MB/s
  UCP_BENCH_CHILD_CPU=0 taskset -c 1 "$bin" -test.run '^$' -test.bench "AMBandwidth/$(( $1 / 1024 ))KiB\$" \
    -test.benchtime "${2}x" | awk '{for (i=1;i<NF;i++) if ($(i+1)=="MB/s" && $i ~ /^[0-9.]+$/) v=$i} END {printf "%.0f", v}'
}

echo "UCX $(pkg-config --modversion ucx); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %8s %6s %12s %12s %7s\n' tls size round perftest_MB/s go_MB/s ratio
for tls in $tlss; do
  export UCX_TLS=$tls
  for size in $sizes; do
    iters=$(( bytes / size ))
    ratios=()
    for r in $(seq "$rounds"); do
      pt=$(perftest "$size" "$iters")
      gb=$(gobench "$size" "$iters")
      ratio=$(awk -v a="$gb" -v b="$pt" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "nan" }')
      ratios+=("$ratio")
      printf '%-10s %8s %6s %12s %12s %7s\n' "$tls" "$size" "$r" "$pt" "$gb" "$ratio"
    done
    median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
    echo "median go/perftest ($tls, $size B): $median (goal >= 0.8)"
  done
done
