#!/usr/bin/env bash
# Runs `ucx_perftest -t ucp_am_bw` between two processes on this machine and
# prints the steady-state message rate (the "average" column of its Final
# line; the "overall" column includes connection set-up).
# Usage: perftest-am.sh SIZE [ITERATIONS]
set -euo pipefail
size=${1:-64}
iters=${2:-2000000}
export UCX_TLS=${UCX_TLS:-shm,self}
port=$(( 20000 + RANDOM % 20000 ))
# Builds with MPI support (Debian 13's UCX 1.18) default to MPI mode and
# then refuse a plain two-process run ("exactly 2 processes ... actual: 1");
# -P 0 turns it off. UCX 1.13 has no -P.
mpi=()
help=$(ucx_perftest -h 2>&1 || true)
if grep -q -- '-P <0|1>' <<<"$help"; then mpi=(-P 0); fi
taskset -c 0 ucx_perftest "${mpi[@]}" -p "$port" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  if ss -ltn 2>/dev/null | grep -q ":$port "; then break; fi
  sleep 0.1
done
out=$(taskset -c 1 ucx_perftest "${mpi[@]}" localhost -p "$port" -t ucp_am_bw -s "$size" -n "$iters" -w 200000 2>&1)
line=$(grep '^Final:' <<<"$out" || true)
if [ -z "$line" ]; then
  echo "perftest failed:" >&2
  echo "$out" >&2
  exit 1
fi
# Final: iters p50 avg overall bw_avg bw_overall rate_avg rate_overall
awk '{print $8}' <<<"$line"
