#!/usr/bin/env bash
# demo.sh runs the RDMO demo on this machine, the way two hosts would run it:
# `rdmo -m server` (the target, with an embedded UROM service and RDMO worker)
# and `rdmo -m client` (the initiator) as separate processes, talking over
# loopback on a free out-of-band port. The client runs the seed flow of
# DOCA's demo and then DEMO_OPS operations (default 100000); the server checks
# its memory byte for byte. Exit status 0 only if every byte checked out.
#
#   ./scripts/demo.sh                 # or: make demo
#   DEMO_OPS=1000000 ./scripts/demo.sh
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
OPS="${DEMO_OPS:-100000}"
GO="${GO:-go}"
BIN=bin/rdmo

case "$OPS" in
  '' | *[!0-9]* | 0) echo "demo: DEMO_OPS must be a whole number of at least 1, got '$OPS'" >&2; exit 2 ;;
esac

# The version and commit `rdmo -v` prints (cmd/rdmo/internal/cli.Version, Commit).
pkg=github.com/openrdmo/rdmo/cmd/rdmo/internal/cli
version="$(git describe --tags --always --dirty 2>/dev/null || echo devel)"
commit="$(git rev-parse --short=12 HEAD 2>/dev/null || true)"
ldflags="-X $pkg.Version=$version -X $pkg.Commit=$commit -X $pkg.BuildDate=$(date -u +%Y-%m-%d)"
if [ -x "$BIN" ]; then
  echo "demo: building $BIN"
else
  echo "demo: building $BIN (the first build compiles every dependency: about a minute; later builds take seconds)"
fi
mkdir -p bin
if ! CGO_ENABLED=1 "$GO" build -ldflags "$ldflags" -o "$BIN" ./cmd/rdmo; then
  echo "demo: build failed (did 'make deps' run?)" >&2
  exit 1
fi

# A free out-of-band port: nobody answers on it.
port=""
for _ in $(seq 1 100); do
  p=$((20000 + RANDOM % 40000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    port=$p
    break
  fi
done
if [ -z "$port" ]; then
  echo "demo: no free TCP port found" >&2
  exit 1
fi

tmp="$(mktemp -d)"
server_pid=""
client_pid=""

# Leave nothing behind, however the script ends. The server's embedded UROM
# service and worker die with the server (parent-death signal); a TERM lets
# the server tear down in order first.
cleanup() {
  local pid
  for pid in $client_pid $server_pid; do
    kill -TERM "$pid" 2>/dev/null
  done
  for _ in $(seq 1 100); do
    local alive=""
    for pid in $client_pid $server_pid; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  for pid in $client_pid $server_pid; do
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

echo "demo: server (target) and client (initiator) on 127.0.0.1, out-of-band port $port, $OPS ops"
"$BIN" -m server --oob-port "$port" --ops "$OPS" >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
# The client's progress and log lines go to the terminal as it runs.
"$BIN" -m client -s 127.0.0.1 --oob-port "$port" >"$tmp/client.out" &
client_pid=$!

wait "$client_pid"
client_rc=$?
client_pid=""
wait "$server_pid"
server_rc=$?
server_pid=""

echo
echo "== server (target) log =="
if [ "$server_rc" -eq 0 ]; then
  cat "$tmp/server.err"
else
  tail -n 40 "$tmp/server.err"
fi
echo
echo "== server (target) summary =="
cat "$tmp/server.out"
echo
echo "== client (initiator) summary =="
cat "$tmp/client.out"
echo

if [ "$server_rc" -eq 0 ] && [ "$client_rc" -eq 0 ] &&
  grep -q "verification PASSED" "$tmp/server.out" && grep -q "verification PASSED" "$tmp/client.out"; then
  echo "demo: PASS: the server verified every byte of $OPS ops (and the seed flow) in its memory"
  exit 0
fi
echo "demo: FAIL: server exit $server_rc, client exit $client_rc" >&2
exit 1
