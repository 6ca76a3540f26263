# Reliability targets (included by the Makefile): fuzzing and the soak.
# docs/SECURITY.md says what they cover.

# fuzz runs every Go fuzz target of the module (found by name, so a new
# Fuzz* function is picked up without editing this file) for FUZZTIME each.
# Inputs that make a target fail are written to the package's
# testdata/fuzz/<target>/ and replayed by every later `go test`.
#   make fuzz                  30 s per target
#   make fuzz FUZZTIME=20000x  the CI form (fuzz-ci)
#   make fuzz FUZZ=FuzzPluginWire FUZZTIME=10m   one target
FUZZTIME ?= 30s
FUZZ     ?= .
FUZZ_TARGETS = $(shell grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . \
	| sed -E 's|^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)$$|\1:\2|' | grep -E ':($(FUZZ))' | sort -u)

.PHONY: fuzz fuzz-ci fuzz-list soak

fuzz-list:
	@for t in $(FUZZ_TARGETS); do echo "$$t"; done

fuzz: deps
	@set -e; n=0; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; n=$$((n+1)); \
	  echo "== $$fn ($$pkg), $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done; echo "fuzz: $$n targets passed, $(FUZZTIME) each"

# The CI form runs a fixed number of inputs per target rather than a time:
# with -fuzztime as a duration, Go can fail a run with "context deadline
# exceeded" when the time runs out while it minimises a new input.
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

# soak runs e2e's TestSoak (4 initiators against a UROM worker process,
# every flush checked, queues rotated, leak and RSS checks at the end) for
# SOAK_DURATION over each transport in SOAK_TRANSPORTS. SOAK_FLAGS adds go
# test flags, e.g. SOAK_FLAGS=-race (slower; the worker's RSS then includes
# the race detector's shadow memory).
SOAK_DURATION   ?= 60s
SOAK_TRANSPORTS ?= tcp shm
SOAK_FLAGS      ?=

soak: deps
	@set -e; for tr in $(SOAK_TRANSPORTS); do \
	  echo "== soak over $$tr, $(SOAK_DURATION)"; \
	  SOAK_TRANSPORT=$$tr SOAK_DURATION=$(SOAK_DURATION) $(GO) test $(SOAK_FLAGS) -count=1 -v -timeout 30m \
	    -run '^TestSoak$$' ./e2e/; \
	done
