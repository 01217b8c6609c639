# srptarget build and test entry points. `make check` is what CI runs.
GO      ?= go
PKGS    ?= ./...
GOFILES  = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

.PHONY: all build test check fmt-check vet unit bench fuzz clean

all: build

build:
	$(GO) build -o bin/srptarget ./cmd/srptarget

# test: formatting, vet, and the unit tests with the race detector.
test: fmt-check vet unit

fmt-check:
	@out=$$(gofmt -l $(GOFILES)); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -race -count=1 $(PKGS)

# check: everything CI runs.
check: test build

# bench: the Go benchmarks of the I/O path (ns/op, allocs/op).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# fuzz: each fuzz target for FUZZTIME (one at a time, as go test requires).
FUZZTIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin
