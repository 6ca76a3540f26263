# rdmo build, test and benchmark entry points.
# `make test` is what the README and CI run; it installs what it needs first.

GO        ?= go
PKGS      ?= ./...
BENCHTIME ?= 2s
APT_PKGS  := libucx-dev ucx-utils pkg-config iproute2
export CGO_ENABLED := 1

.PHONY: all deps build test vet fmt-check unit bench bench-ucx clean demo

all: build

# deps installs the system packages the build links against. It is idempotent:
# apt-get runs only when a package is missing, and `apt-get update` only when
# the package lists are empty or the first install attempt fails.
deps:
	@missing=""; for p in $(APT_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  if [ -z "$$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock)" ]; then $$SUDO apt-get update -qq; fi; \
	  $$SUDO apt-get install -y -qq --no-install-recommends $$missing \
	    || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $$missing; }; \
	fi
	@pkg-config --exists ucx || { echo "deps: pkg-config cannot find ucx" >&2; exit 1; }

build: deps
	$(GO) build $(PKGS)

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet: deps
	$(GO) vet $(PKGS)

# RDMO_UCP_CHECK_THREADS makes every UCX worker call check that it comes
# from the worker's own thread (package ucp), in the tests and every process
# they start. -timeout: e2e alone took 9m15s of the former 12m under `make
# test-under-load` (CPU hogs on both cores of a shared machine).
# scripts/gotest.sh keeps the whole output in .test-output/go-test.log and
# ends a failed run with a digest (failing tests, UCX assertions, the tests
# on a crashed binary's stacks), since CI shows only the tail.
test: deps fmt-check vet
	RDMO_UCP_CHECK_THREADS=1 GO=$(GO) ./scripts/gotest.sh -race -count=1 -timeout 25m $(PKGS)

# bench runs the Go benchmarks and, alternating with them in the same run,
# ucx_perftest's AM bandwidth test on shared memory, so the Go numbers are
# read as a ratio to UCX's own (see docs/BENCHMARKS.md).
bench: deps
	ROUNDS=$(or $(ROUNDS),5) ./scripts/bench-ucp.sh
	UCX_TLS=shm,self $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./ucp ./rdmo/... ./host/initiator

# demo runs the RDMO demo on this machine: bin/rdmo as server (target, with
# an embedded UROM service) and as client (initiator), separate processes on
# loopback; it passes only if the server verified every byte. DEMO_OPS sets
# the workload size.
DEMO_OPS ?= 100000
demo: deps
	DEMO_OPS=$(DEMO_OPS) GO=$(GO) ./scripts/demo.sh

clean:
	$(GO) clean -testcache

# Targets of their own (fuzzing, soak, ...) live in mk/.
-include mk/*.mk
