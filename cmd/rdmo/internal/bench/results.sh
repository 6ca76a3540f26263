#!/usr/bin/env bash
# Produces the figures of docs/BENCHMARKS.md's goal table (make
# bench-rdmo). Every figure is a ratio to a baseline measured in the same
# run: `rdmo bench` interleaves its rows round by round, ucx_perftest
# (perftest-am, perftest-put) among them, and reports CPU time per
# operation, which a shared machine disturbs far less than a rate.
#
#   DURATION  measured time per row           (default 5s)
#   RSS_TIME  length of the RSS run            (default 60s)
#   OUT       where the JSON, logs, plot and profiles go (default /tmp/rdmo-bench)
#   GO        the go command                   (default go)
# Needs ucx_perftest (ucx-utils, installed by `make deps`).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
out=${OUT:-/tmp/rdmo-bench}
dur=${DURATION:-5s}
rss_time=${RSS_TIME:-60s}
mkdir -p "$out"
echo "building $out/rdmo"
"${GO:-go}" build -o "$out/rdmo" ./cmd/rdmo
rdmo="$out/rdmo"
# The handler forms' plugin and module, where $out/rdmo bench finds them
# (plugins beside the executable).
mkdir -p "$out/plugins"
"${GO:-go}" build -o "$out/plugins/rdmo-plugin-fetch-add" ./plugins/ops/cmd/rdmo-plugin-fetch-add
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 "${GO:-go}" build -buildmode=c-shared -o "$out/plugins/rdmo-plugin-fetch-add.wasm" ./plugins/ops/cmd/rdmo-plugin-fetch-add-wasm

# step NAME ARGS...: one rdmo bench run; its table goes to the terminal and
# $out/NAME.txt, its log to $out/NAME.log. On failure the reason (the log's
# last lines) is printed, not only make's "Error 1".
step() {
  local name=$1
  shift
  echo "== $name: rdmo bench $*"
  if ! "$rdmo" bench "$@" --results "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.log"; then
    echo "bench-rdmo: step $name failed; last lines of $out/$name.txt and $out/$name.log:" >&2
    tail -n 15 "$out/$name.txt" >&2
    tail -n 25 "$out/$name.log" >&2
    exit 1
  fi
  sed -n '/^rdmo bench: topology .* initiator(s), .* CPUs/,$p' "$out/$name.txt"
}

step dpu-64 --topology dpu --size 64 --duration "$dur" --cpuprofile "$out/prof-dpu"
step shm-64 --topology shm --size 64 --duration "$dur" --cpuprofile "$out/prof-shm"
step dpu-sizes --topology dpu --size 1k,64k,1m --duration "$dur" --modes raw-am,rdmo-append/owned,perftest
step shm-sizes --topology shm --size 1k,64k,1m --duration "$dur" --modes raw-am,rdmo-append/owned,perftest
step noagg-64 --topology dpu --size 64 --duration "$dur" --modes raw-am,rdmo-append/owned,perftest --aggregate=false
step forms --topology dpu --modes fetch-add,forms --duration "$dur"
step rss --topology shm --size 64 --modes rdmo-append/owned --duration "$rss_time"
echo "results in $out (profiles: go tool pprof $out/rdmo $out/prof-dpu/worker-*.pprof)"
