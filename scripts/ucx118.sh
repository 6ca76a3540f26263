#!/usr/bin/env bash
# Runs the UCX-facing tests against a second UCX: Debian 13 "trixie"'s UCX
# 1.18, in a chroot. Trixie's UCX needs glibc 2.38, newer than the host's,
# so it cannot be installed beside the system's 1.13: the tests run inside a
# minimal trixie root (debootstrap) that gets the host's Go toolchain, module
# cache and this repository bind-mounted.
#
#   scripts/ucx118.sh            build the root if needed, run the tests
#   scripts/ucx118.sh -- CMD...  run CMD in the repository inside the root
#                                (make bench-ucx-1.18 runs `make bench`)
#
# Environment:
#   UCX118_ROOT    cached root (default /var/cache/rdmo/trixie-ucx); kept
#                  between runs, outside the repository
#   UCX118_PKGS    go test package patterns (required to run the tests;
#                  mk/ucx118.mk holds the list)
#   UCX118_E2E     -run pattern of the e2e tests to run (mk/ucx118.mk)
#   DEBIAN_MIRROR  mirror for debootstrap (default: the first deb.debian.org-
#                  style URI of the host's apt sources)
#   UCX_*          passed into the root as they are (UCX_TLS,
#                  UCX_PROTO_ENABLE, ...); nothing else of the caller's
#                  environment is
#
# Any failure to build or enter the root is an error, never a skip: it needs
# root (chroot, mount, unshare) and a Debian mirror.
set -euo pipefail

die() { echo "ucx118: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot)"

# Each run mounts in a mount namespace of its own, so its mounts go away
# with its last process on every exit path (also SIGKILL, where no trap
# runs), and runs at the same time (a test run and a bench run, several
# worktrees) neither see nor unmount each other's mounts of the shared root.
if [ -z "${UCX118_IN_NS:-}" ]; then
  command -v unshare >/dev/null || die "needs unshare (util-linux)"
  UCX118_IN_NS=1 exec unshare --mount --propagation private "$(readlink -f "$0")" "$@"
fi

cd "$(dirname "$0")/.."
repo=$(pwd)
root=${UCX118_ROOT:-/var/cache/rdmo/trixie-ucx}
goroot=$(go env GOROOT)
gomodcache=$(go env GOMODCACHE)

# What the root holds besides minbase: the build (libucx-dev, gcc,
# pkg-config, libc6-dev) and what `make bench` runs (make, ucx_perftest from
# ucx-utils, ss from iproute2). A root cached before a package joined this
# list gets it installed on its next run (ensure_pkgs).
root_pkgs=(libucx-dev gcc pkg-config libc6-dev make ucx-utils iproute2)

sudo_apt() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$@" \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; }
}

mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  # deb822 (URIs: ...) or one-line (deb URL suite ...) sources; the first
  # URI that serves the main archive (not -security) is the mirror.
  local u
  u=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
      | awk '/^URIs:/ {for (i=2;i<=NF;i++) print $i} /^deb / {print ($2 ~ /^\[/ ? $3 : $2)}' \
      | grep -E '/debian/?$' | grep -v security | head -1)
  echo "${u:-http://deb.debian.org/debian}"
}

build_root() {
  if [ -x "$root/usr/bin/gcc" ] && chroot "$root" pkg-config --exists ucx 2>/dev/null; then
    return
  fi
  command -v debootstrap >/dev/null || sudo_apt debootstrap
  # The trixie keyring may be newer than the host's: the host keyring still
  # verifies trixie's Release file (same archive keys); if not, debootstrap
  # fails here and says why.
  local tmp="$root.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$root")"
  echo "ucx118: building $root from $(mirror) (about a minute, once)"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${root_pkgs[*]}")" \
       trixie "$tmp" "$(mirror)" >"$tmp.log" 2>&1; then
    tail -20 "$tmp.log" >&2
    rm -rf "$tmp"
    die "debootstrap failed (log: $tmp.log)"
  fi
  rm -f "$tmp.log"
  rm -rf "$root"
  mv "$tmp" "$root"
}

# ensure_pkgs installs what root_pkgs lists and the root lacks (a root
# built before the list grew), with the root's own apt (/proc and /dev
# mounted); nothing runs when all are there.
ensure_pkgs() {
  local p missing=()
  for p in "${root_pkgs[@]}"; do
    chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done
  [ ${#missing[@]} = 0 ] && return
  echo "ucx118: installing ${missing[*]} into $root"
  local apt=(chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin
             DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -qq)
  "${apt[@]}" install --no-install-recommends "${missing[@]}" \
    || { "${apt[@]}" update && "${apt[@]}" install --no-install-recommends "${missing[@]}"; } \
    || die "could not install ${missing[*]} into $root"
}

mounted=()
cleanup() {
  local i m
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  # And whatever the tests mounted inside (ip netns mounts /run/netns).
  # Only this run's: the mount namespace is its own.
  for m in $(awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bind() { # bind SRC DST-inside-root
  mkdir -p "$root$2"
  mount --bind "$1" "$root$2"
  mounted+=("$root$2")
}

build_root
# The root becomes a mount point of its own, so that what runs inside can
# change mount propagation on "/" (ip netns does: the netns tests).
mount --bind "$root" "$root"
mounted+=("$root")
mount --make-rprivate "$root"
# Modules come from the host's cache: the root has no module proxy of its
# own (GOPROXY=off inside).
go mod download

# Each run gets its own mount points: a crashed earlier run may have left
# mounts behind (cleanup is lazy-unmount, so they are gone or going).
bind /proc /proc
bind /sys /sys
bind /dev /dev
bind /dev/shm /dev/shm
bind "$goroot" /usr/local/go
bind "$gomodcache" /root/go/pkg/mod
# A build cache of its own: objects linked against the host's glibc/UCX
# headers must not be reused inside (cgo hashes the headers, but not the
# libraries they link to).
mkdir -p "$root/root/.cache/go-build"
bind "$repo" /src
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# debootstrap writes no /etc/hosts, and without one "localhost" (which
# ucx_perftest's client is given) does not resolve inside.
[ -e "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
ensure_pkgs

# UCX_* of the caller's environment, passed in as they are.
ucx_env=()
while IFS= read -r kv; do ucx_env+=("$kv"); done < <(env | grep '^UCX_[A-Za-z0-9_]*=' || true)

inroot() {
  chroot "$root" /usr/bin/env -i \
    HOME=/root PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOPATH=/root/go GOMODCACHE=/root/go/pkg/mod GOCACHE=/root/.cache/go-build \
    GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1 \
    CI="${CI:-}" TMPDIR=/tmp RDMO_UCP_CHECK_THREADS="${RDMO_UCP_CHECK_THREADS:-}" \
    ${ucx_env[@]+"${ucx_env[@]}"} \
    /bin/sh -c 'cd /src && exec "$@"' sh "$@"
}

ver=$(inroot sh -c 'pkg-config --modversion ucx')
echo "ucx118: UCX $ver in $root"
case "$ver" in 1.18.*) ;; *) die "expected UCX 1.18 in the root, found $ver" ;; esac

if [ "${1:-}" = "--" ]; then
  shift
  inroot "$@"
  exit
fi

pkgs=${UCX118_PKGS:?"the package list (make test-ucx-1.18 sets it)"}
e2e=${UCX118_E2E:?"the e2e -run pattern (make test-ucx-1.18 sets it)"}
start=$(date +%s)
# shellcheck disable=SC2086 # pkgs is a list of patterns
# UCX118_TESTFLAGS: extra go test flags (make test-ucx-1.18 RACE=1 adds
# -race; CI leaves it out: the race detector's findings do not depend on
# the UCX version, and make test runs every package with it on 1.13).
# shellcheck disable=SC2086
inroot go test ${UCX118_TESTFLAGS:-} -count=1 -timeout 15m $pkgs
# shellcheck disable=SC2086
inroot go test ${UCX118_TESTFLAGS:-} -count=1 -timeout 20m -run "$e2e" ./e2e/
echo "ucx118: passed on UCX $ver in $(( $(date +%s) - start )) s"
