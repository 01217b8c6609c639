# srptarget build and test entry points. `make check` is what CI runs.
GO      ?= go
PKGS    ?= ./...
GOFILES  = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

.PHONY: all build test check fmt-check vet unit bench bench-go fuzz clean e2e demo

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

# check: everything CI runs: the Go tests, then the VM end-to-end run and the quick half of the
# stress scenarios (the kernel's ib_srp against the daemon over soft-RoCE).
check: test build e2e stress-quick

# e2e: the daemon against the Linux SRP initiator (ib_srp) over soft-RoCE in a qemu VM
# (integration/vm/README.md): builds the daemon and the VM image, runs the checks, keeps the
# serial log and the result table in SRPT_VM_DIR/logs (default /tmp/srptarget-vm). Needs root.
e2e:
	GO="$(GO)" integration/vm/e2e.sh

# demo: the same VM with configs/demo.yaml: login, lsblk, sg_inq, a short fio run.
demo:
	GO="$(GO)" integration/vm/demo.sh

# bench-go: the Go benchmarks of the I/O path (ns/op, allocs/op) over the in-memory fabric.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# bench: srptarget against LIO ib_srpt in one qemu VM boot (soft-RoCE, the kernel's ib_srp),
# the same fio jobs alternating between the targets, with a CPU profile of the daemon; table,
# CSV and chart in $$SRPT_VM_DIR/bench/<date-time> (docs/benchmarks.md), then the Go benchmarks.
# Needs root; 15-30 min. BENCH_ARGS go to the guest (e.g. BENCH_ARGS='rounds=5').
.PHONY: bench-vm
bench: bench-vm bench-go
bench-vm:
	GO="$(GO)" integration/vm/bench.sh $(BENCH_ARGS)

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

# stress: the faults a SAN sees, in the VM, with the data checked (integration/vm/guest/stress.sh):
# logout/login cycles and resets under I/O, 4/8 MiB commands, SIGKILL and restart, RDMA device
# removal, refused-login storms, two initiator ports x 4 channels, an initiator that never takes
# its responses (tools/srpflood) beside one that verifies. stress-quick: the subset CI runs on every
# push (under 5 minutes of VM time). Needs root; logs in $$SRPT_VM_DIR/logs.
.PHONY: stress stress-quick
stress:
	GO="$(GO)" integration/vm/stress.sh

stress-quick:
	GO="$(GO)" integration/vm/stress.sh quick=1
