# srptarget build and test entry points. `make check` is what CI runs.
GO      ?= go
PKGS    ?= ./...
GOFILES  = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*')

.PHONY: all build test check fmt-check vet unit bench bench-go fuzz clean e2e demo e2e-alua

all: build

# RBD: the rbd build tag (backstore: rbd, linked against librbd and librados) where their
# development files are installed; RBD=1 insists (the build fails without them), RBD=0 leaves
# it out. Without it the daemon refuses rbd LUNs and needs no Ceph library.
RBD    ?= $(shell test -e /usr/include/rbd/librbd.h && test -e /usr/include/rados/librados.h && echo 1 || echo 0)
GOTAGS  = $(if $(filter 1,$(RBD)),-tags rbd)

# The commit the binary is built from and whether the tree has uncommitted changes, stamped
# into it for srptarget version, status, the log and srptarget_build_info (empty outside a git
# checkout: the version is then the release alone). The release itself is in the source
# (cmd/srptarget/version.go) and CHANGELOG.md.
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED ?= $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true || echo false)
LDFLAGS   = $(if $(COMMIT),-X main.buildCommit=$(COMMIT) -X main.buildModified=$(MODIFIED))

# build says which backstores the binary serves: with RBD, rbd, linked against librbd and
# librados (and so Ceph's libraries at run time).
build:
	$(GO) build $(GOTAGS) -ldflags '$(LDFLAGS)' -o bin/srptarget ./cmd/srptarget
	@bin/srptarget version | sed -n '1s/^/built bin\/srptarget: /p; s/^backstores/  backstores/p'

# test: formatting, vet, and the unit tests with the race detector.
test: fmt-check vet unit

fmt-check:
	@out=$$(gofmt -l $(GOFILES)); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# vet twice with the rbd tag: the code with and without it; and the checks that run in the VM
# (the vmguest tag), which go test on the host leaves out.
vet:
	$(GO) vet $(PKGS)
	$(if $(GOTAGS),$(GO) vet $(GOTAGS) $(PKGS))
	$(GO) vet -tags vmguest ./integration/vm/guest/checks

unit:
	$(GO) test $(GOTAGS) -race -count=1 $(PKGS)

# test-rbd: the RBD backstore and an RBD LUN served end to end (over the in-memory fabric)
# against a throw-away one-OSD Ceph cluster in RAM (integration/ceph/cluster.sh), the OSD
# stopped and resumed, then a short benchmark beside rbd bench. Needs ceph-mon, ceph-osd,
# librbd-dev and librados-dev (.ci/run installs them); about a minute.
.PHONY: test-rbd
test-rbd:
	GO="$(GO)" integration/ceph/test-rbd.sh

# check: everything CI runs: the Go tests, promtool over the alerting rules and the dashboard's
# queries (monitoring-test), the RBD tests against a throw-away Ceph cluster,
# make install into a temporary directory, the installed unit booted under systemd in a
# container (nspawn-test), then the VM end-to-end runs (the daemon, the
# ib/verbs tests, persistent reservations from two initiator ports, ALUA over two target ports,
# the SBC-4 commands of e2e-sbc)
# and the quick half of the stress scenarios (the kernel's ib_srp against the daemon over
# soft-RoCE). make e2e-rbd (an RBD LUN in the VM, about 5 minutes with its own image) is not
# part of it.
check: test monitoring-test test-rbd build install-test nordma-test nspawn-test nspawn-test-deb e2e e2e-pr e2e-alua e2e-sbc stress-quick

# test-ib-sim: srptarget dm-agent (InfiniBand Device Management) and ib-discover on a simulated
# InfiniBand fabric: ibsim, umad2sim and OpenSM, one switch and three HCAs, no kernel module
# (integration/ibsim/test-ib-sim.sh). Installs ibsim-utils, libumad2sim0, opensm and
# infiniband-diags when missing (root); about 15 s. Not part of check.
.PHONY: test-ib-sim
test-ib-sim:
	GO="$(GO)" integration/ibsim/test-ib-sim.sh

# e2e: the daemon against the Linux SRP initiator (ib_srp) over soft-RoCE in a qemu VM
# (integration/vm/README.md): builds the daemon and the VM image, runs the checks, keeps the
# serial log and the result table in SRPT_VM_DIR/logs (default /tmp/srptarget-vm), then the
# ib/verbs package's tests on soft-RoCE in a second VM. Needs root.
e2e:
	GO="$(GO)" integration/vm/e2e.sh

# e2e-pr: SCSI-3 persistent reservations in the VM: sg_persist from two initiator ports of one
# LUN, APTPL across a daemon restart, fence_scsi's sequence (integration/vm/pr.sh). Needs root;
# under a minute once the image is built.
.PHONY: e2e-pr
e2e-pr:
	GO="$(GO)" integration/vm/pr.sh

# e2e-rbd: the kernel's ib_srp against an RBD LUN in the VM, the Ceph cluster inside the guest
# (integration/vm/e2e-rbd.sh; its own image and work directory, /tmp/srptarget-vm-rbd). Needs
# root, librbd-dev and librados-dev; about 5 minutes.
.PHONY: e2e-rbd
e2e-rbd:
	GO="$(GO)" integration/vm/e2e-rbd.sh

# e2e-alua: ALUA in the VM: two target ports in two target port groups, sg_rtpg, dm-multipath
# with the ALUA handler, a SIGHUP reload that swaps the groups' states and moves the I/O.
.PHONY: e2e-alua
e2e-alua:
	GO="$(GO)" integration/vm/alua.sh

# e2e-sbc: the SBC-4 and SPC-4 commands of issue 35 in the VM through ib_srp and sg3_utils
# (integration/vm/sbc.sh): unsupported service actions, WRITE SAME to the end of the medium,
# 4 KiB physical blocks, EXTENDED COPY, WRITE ATOMIC(16), SANITIZE. Needs root; about two minutes
# once the image is built.
.PHONY: e2e-sbc
e2e-sbc:
	GO="$(GO)" integration/vm/sbc.sh

# e2e-devwait: the boot order in the VM (integration/vm/devwait.sh, TestDevWait): serve started
# before any RDMA module waits, listens once soft-RoCE and its address are up, stops on SIGTERM
# while it waits, starts on a reload after a start that failed. Needs root; about a minute.
# blockdel-control: the control for the stress test's device removal (integration/vm/blockdel.sh,
# TestBlockDel): fio on a scsi_debug disk deleted under I/O, block device against sg. Neither is
# part of check.
.PHONY: e2e-devwait blockdel-control
e2e-devwait:
	GO="$(GO)" integration/vm/devwait.sh
blockdel-control:
	GO="$(GO)" integration/vm/blockdel.sh

# demo: the same VM with configs/demo.yaml: login, lsblk, sg_inq, a short fio run; while it
# runs status, sessions, luns, stats, reload --dry-run and /metrics; the initiator's counters
# checked against fio's I/O counts; a reload preview that would lose the RAM disk's data.
demo:
	GO="$(GO)" integration/vm/demo.sh

# PGO_PROFILE: the CPU profile the daemon is built with (Go's profile-guided optimization:
# go build and go install take a main package's default.pgo by themselves). bench-go builds
# the benchmarks with it too, so that they measure the code the daemon runs.
PGO_PROFILE = cmd/srptarget/default.pgo

# bench-go: the Go benchmarks of the I/O path (ns/op, allocs/op) over the in-memory fabric.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -pgo=$(PGO_PROFILE) $(PKGS)

# pgo: remake PGO_PROFILE from the daemon's CPU profiles of two-host benches (make bench writes
# them; the profile is one of a daemon under the bench's load on the 1-vCPU target):
#   make pgo PGO_FROM="$$SRPT_VM_DIR/bench/2host-<date-time> ..."
.PHONY: pgo
pgo:
	@test -n "$(PGO_FROM)" || { echo "usage: make pgo PGO_FROM='DIR...' (two-host bench directories with srptarget.cpu.ch*.pprof)"; exit 2; }
	@set -- $(foreach d,$(PGO_FROM),$(wildcard $(d)/srptarget.cpu.ch*.pprof)); \
	if [ $$# -eq 0 ]; then echo "pgo: no srptarget.cpu.ch*.pprof in $(PGO_FROM) (a two-host bench profiles round 2 unless profile=0)"; exit 1; fi; \
	echo "pgo: merging $$*"; \
	$(GO) tool pprof -proto "$$@" >$(PGO_PROFILE).new || { rm -f $(PGO_PROFILE).new; exit 1; }; \
	mv $(PGO_PROFILE).new $(PGO_PROFILE)

# bench: srptarget against LIO ib_srpt, each target on a host of its own: two qemu VMs on one
# virtual link (a 1-vCPU target VM with both targets, a 2-vCPU initiator VM with ib_srp and
# fio), soft-RoCE on each, the same fio jobs alternating between the targets; the target
# host's CPU per I/O. Table, CSV and chart in $$SRPT_VM_DIR/bench/2host-<date-time>
# (docs/benchmarks.md, "Method: two hosts"), then the Go benchmarks. Needs root; about 10 min.
# BENCH_ARGS go to both guests (e.g. BENCH_ARGS='rounds=5').
# bench-loopback: the one-VM bench (initiator and targets in one VM), with the daemon's CPU
# profile, scheduler and system-call counts, and srpt_modes; bench-vm is its old name.
.PHONY: bench-2host bench-loopback bench-vm
bench: bench-2host bench-go
bench-2host:
	GO="$(GO)" integration/vm/bench-2host.sh $(BENCH_ARGS)
bench-loopback:
	GO="$(GO)" integration/vm/bench.sh $(BENCH_ARGS)
# bench-uring: the file backstore's io_uring queue against fio's io_uring engine, 4 KiB random
# reads at QD 32 on tmpfs and on ext4 in a loop-mounted file, pinned to one CPU (root; a few
# minutes; integration/uring/bench.sh).
.PHONY: bench-uring
bench-uring:
	GO="$(GO)" integration/uring/bench.sh
# bench-uring-vm: the same comparison in the test VM (tmpfs and ext4 in the guest, one vCPU,
# rounds alternating; integration/uring/vm-bench.sh, SRPT_VM_DIR and the VM lock as for e2e).
.PHONY: bench-uring-vm
bench-uring-vm:
	GO="$(GO)" integration/uring/vm-bench.sh $(BENCH_ARGS)
bench-vm: bench-loopback

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

# install: the binary, the systemd unit, the example configuration, the man pages, the
# shell completions, the Grafana dashboard and the Prometheus alerting rules, under DESTDIR (for packaging; empty by default) and PREFIX.
#   sudo make install                         # /usr/local/bin/srptarget, /usr/local/lib/systemd/system/...
#   make install DESTDIR=/tmp/pkg PREFIX=/usr # a package tree
# The unit goes to $(PREFIX)/lib/systemd/system, not /lib/systemd/system: systemd reads units
# from /usr/local/lib/systemd/system ("installed by the administrator", systemd.unit(5)) as
# well as /usr/lib/systemd/system, so both prefixes work, and a local install stays out of the
# package manager's directory. Its ExecStart= is rewritten to $(BINDIR). The configuration
# is in /etc whatever PREFIX is (serve's default --config is /etc/srptarget/srptarget.yaml):
# only srptarget.yaml.example is written, never srptarget.yaml. The sysusers.d(5) file makes
# the unit's user: systemd-sysusers reads /etc/sysusers.d, /run and /usr/lib only, hence
# SYSUSERSDIR in /etc. Completions go where bash-completion, zsh and fish look for them.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
UNITDIR     ?= $(PREFIX)/lib/systemd/system
MANDIR      ?= $(PREFIX)/share/man
SYSCONFDIR  ?= /etc
SYSUSERSDIR ?= $(SYSCONFDIR)/sysusers.d
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
MONITORDIR  ?= $(PREFIX)/share/srptarget/monitoring
INSTALL     ?= install

.PHONY: install uninstall install-test
install: build
	rm -rf bin/man && bin/srptarget gen-man bin/man
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(SYSCONFDIR)/srptarget $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	$(INSTALL) -m 0755 bin/srptarget $(DESTDIR)$(BINDIR)/srptarget
	sed 's|/usr/local/bin/srptarget|$(BINDIR)/srptarget|' configs/srptarget.service >bin/srptarget.service
	$(INSTALL) -m 0644 bin/srptarget.service $(DESTDIR)$(UNITDIR)/srptarget.service
	$(INSTALL) -m 0644 configs/srptarget.sysusers $(DESTDIR)$(SYSUSERSDIR)/srptarget.conf
	$(INSTALL) -m 0644 configs/example.yaml $(DESTDIR)$(SYSCONFDIR)/srptarget/srptarget.yaml.example
	$(INSTALL) -m 0644 bin/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man5
	sed -e "s/^\.TH SRPTARGET.YAML 5 \"\" \"srptarget VERSION\"/.TH SRPTARGET.YAML 5 \"\" \"$$(bin/srptarget version | sed -n '1s/^srptarget //p')\"/" \
	  man/srptarget.yaml.5 >bin/man/srptarget.yaml.5
	$(INSTALL) -m 0644 bin/man/srptarget.yaml.5 $(DESTDIR)$(MANDIR)/man5/srptarget.yaml.5
	bin/srptarget completion bash >bin/srptarget.bash
	bin/srptarget completion zsh >bin/_srptarget
	bin/srptarget completion fish >bin/srptarget.fish
	$(INSTALL) -m 0644 bin/srptarget.bash $(DESTDIR)$(BASHCOMPDIR)/srptarget
	$(INSTALL) -m 0644 bin/_srptarget $(DESTDIR)$(ZSHCOMPDIR)/_srptarget
	$(INSTALL) -m 0644 bin/srptarget.fish $(DESTDIR)$(FISHCOMPDIR)/srptarget.fish
	$(INSTALL) -d $(DESTDIR)$(MONITORDIR)
	$(INSTALL) -m 0644 configs/monitoring/srptarget-dashboard.json configs/monitoring/srptarget-alerts.yml $(DESTDIR)$(MONITORDIR)/
	@if [ -z "$(DESTDIR)" ]; then \
	  echo "installed. Next: systemd-sysusers; write $(SYSCONFDIR)/srptarget/srptarget.yaml (from the .example);"; \
	  echo "  srptarget validate; systemctl daemon-reload; systemctl enable --now srptarget"; \
	fi

# uninstall: what install wrote, except the configuration directory (it may hold srptarget.yaml).
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/srptarget $(DESTDIR)$(UNITDIR)/srptarget.service \
	  $(DESTDIR)$(SYSUSERSDIR)/srptarget.conf $(DESTDIR)$(SYSCONFDIR)/srptarget/srptarget.yaml.example \
	  $(DESTDIR)$(MANDIR)/man1/srptarget.1 $(DESTDIR)$(MANDIR)/man1/srptarget-*.1 $(DESTDIR)$(MANDIR)/man5/srptarget.yaml.5 \
	  $(DESTDIR)$(BASHCOMPDIR)/srptarget $(DESTDIR)$(ZSHCOMPDIR)/_srptarget $(DESTDIR)$(FISHCOMPDIR)/srptarget.fish \
	  $(DESTDIR)$(MONITORDIR)/srptarget-dashboard.json $(DESTDIR)$(MONITORDIR)/srptarget-alerts.yml

# nordma-test: the daemon on a host without RDMA (this one, CI): serve waits for a device,
# status answers on the control socket, /metrics answers, SIGTERM stops it
# (integration/nordma-test.sh).
.PHONY: nordma-test
nordma-test: build
	integration/nordma-test.sh

# deb: a Debian package of the make install tree (PREFIX=/usr), built with dpkg-deb
# (packaging/deb.sh): bin/srptarget_<version>_<arch>.deb, which depends on rdma-core's
# libraries only; with RBD=1, srptarget-rbd_..., which also depends on librbd1 and librados2
# and replaces srptarget. nspawn-test-deb boots it in the container as nspawn-test does the
# make install tree.
.PHONY: deb nspawn-test-deb
deb:
	MAKE="$(MAKE)" RBD="$(RBD)" packaging/deb.sh
nspawn-test-deb:
	$(MAKE) deb RBD=0
	DEB="$$(ls -t bin/srptarget_*.deb | head -1)" MAKE="$(MAKE)" integration/nspawn-test.sh

# nspawn-test: the installed unit under a booted systemd: a Debian 12 minbase tree (debootstrap,
# cached in SRPT_NSPAWN_CACHE, default /var/cache/srptarget-ci), make install into it,
# systemd-nspawn -b and a probe unit ordered after srptarget.service (integration/nspawn-test.sh).
# Needs root, debootstrap and systemd-nspawn; about 20 s once the tree is cached (a minute more
# to make it).
.PHONY: nspawn-test
nspawn-test:
	MAKE="$(MAKE)" integration/nspawn-test.sh

# monitoring-test: configs/monitoring checked by promtool: the alerting rules parse and pass
# their unit tests (srptarget-alerts.test.yml), the Grafana dashboard's queries parse
# (integration/monitoring/check.sh; promtool taken out of Debian's prometheus package, cached in
# /var/cache/srptarget-ci/promtool, when it is not installed). A few seconds.
.PHONY: monitoring-test
monitoring-test:
	GO="$(GO)" integration/monitoring/check.sh

# install-test: make install into a temporary DESTDIR, list and check what it wrote
# (integration/install-test.sh).
install-test:
	MAKE="$(MAKE)" integration/install-test.sh

# stress: the faults a SAN sees, in the VM, with the data checked (TestStress of integration/vm/guest/checks):
# logout/login cycles and resets under I/O, 4/8 MiB commands, SIGKILL and restart, RDMA device
# removal, refused-login storms, two initiator ports x 4 channels, an initiator that never takes
# its responses (tools/srpflood) beside one that verifies. stress-quick: the subset CI runs on every
# push (under 5 minutes of VM time). Needs root; logs in $$SRPT_VM_DIR/logs. The full stress run
# ends with stress-gateways.
.PHONY: stress stress-quick stress-gateways
stress:
	GO="$(GO)" integration/vm/stress.sh
	$(MAKE) stress-gateways

# stress-gateways: two daemons in front of one RBD image (the Ceph cluster in the guest, the
# e2e-rbd image in /tmp/srptarget-vm-rbd), dm-multipath over both target ports, one daemon
# killed with SIGKILL and restarted under fio with verify: failover time, verify errors
# (integration/vm/gateways.sh), the ALUA states shared by both (sg_stpg through one gateway, seen
# through the other, dm-multipath following), then persistent reservations shared by both: fence_scsi's keys
# from two nodes, a PREEMPT AND ABORT that fences writes through both gateways, a gateway cut
# off from the cluster failing closed. Needs root, librbd-dev and librados-dev; about 7 minutes.
stress-gateways:
	GO="$(GO)" integration/vm/gateways.sh

stress-quick:
	GO="$(GO)" integration/vm/stress.sh quick=1
