#!/bin/bash
# checks.sh - runs the Go checks in the VM: the test binary of integration/vm/guest/checks
# (built on the host with `CGO_ENABLED=0 go test -c -tags vmguest`), passed in as
# /usr/local/bin/checks.test. The checks write the result table themselves and read the run's
# k=v arguments from /lab/args.
#
# Arguments (k=v): test=E2E (the test function, TestE2E), run= (go test's -run pattern
# instead, e.g. run='TestE2E/LUN_0' for one check, or 'TestE2E/restart' for a group), plus the
# test's own.
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=/usr/local/bin/checks.test
RUN=$(arg run "^Test$(arg test E2E)\$")
[ -x "$BIN" ] || fail "no $BIN: build it on the host and pass it in (host-lib.sh host_checks_build)"
# The test's own timeout comes before the guest's watchdog: its goroutine dump is worth more.
tmo=$(arg guest_timeout 0)
[ "$tmo" -gt 60 ] 2>/dev/null && tmo=$((tmo - 30)) || tmo=0
cd /tmp && exec "$BIN" -test.v -test.count=1 -test.timeout "${tmo}s" -test.run "$RUN"
