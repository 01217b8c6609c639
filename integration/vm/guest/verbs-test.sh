#!/bin/bash
# verbs-test.sh - runs the tests of package ib/verbs (the rdma-core implementation of the ib
# interfaces) against soft-RoCE inside the test VM: both ends of every connection in one
# process, over rxe0's IPv4, IPv6 and IPv6 link-local addresses. The last test removes the
# device (rdma link delete) under live listeners, a connection and memory registrations and
# adds it back, twice: as the only device, then with a second device (rxe1 on dummy1).
#
#   go test -c -o /tmp/verbs.test ./ib/verbs
#   SRPT_VM_FILES="/tmp/verbs.test:/usr/local/bin/verbs.test" \
#     integration/vm/run-vm.sh integration/vm/guest/verbs-test.sh [k=v ...]
#
# The test binary is built on the host; it links dynamically to libibverbs.so.1 and
# librdmacm.so.1, which the image has (bookworm's, as on the build host).
#
# Arguments (k=v), all optional:
#   bin=/usr/local/bin/verbs.test   the test binary
#   run=.                           -test.run pattern for the main run
#   race_bin=                       a second binary (go test -race -c) run the same way
#   linklocal=1                     also test dummy0's IPv6 link-local address (0: skip)
#   removal=1                       run TestDeviceRemoval last, twice (0: skip)
#   removal_repeat=1                runs of each of the two (more: to shake out rare hangs)
#   test_timeout=600s               -test.timeout per run
# plus setup_rxe's (netdev, mac, ip4, ip6; see lib.sh).
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/verbs.test)
RUN=$(arg run .)
RACE_BIN=$(arg race_bin "")
LINKLOCAL=$(arg linklocal 1)
REMOVAL=$(arg removal 1)
REMOVAL_REPEAT=$(arg removal_repeat 1)
TEST_TIMEOUT=$(arg test_timeout 600s)

[ -x "$BIN" ] || fail "no test binary $BIN (SRPT_VM_FILES=\"/tmp/verbs.test:$BIN\")"

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup (rdma_rxe on $RXE_NETDEV)"
record rxe pass "$RXE on $RXE_NETDEV, GID[$RXE_GID4] $RXE_IP4, GID[$RXE_GID6] $RXE_IP6"
ADDRS="$RXE_IP4 $RXE_IP6"

# The link-local address appears once the netdev is up and leaves the tentative state after
# DAD; RDMA/CM cannot bind a tentative address.
ll_addr() {
	ip -6 -o addr show dev "$RXE_NETDEV" scope link 2>/dev/null |
		awk '!/tentative/ { sub(/\/.*/, "", $4); print $4; exit }'
}
# shellcheck disable=SC2317 # called through wait_for
has_ll() { [ -n "$(ll_addr)" ]; }
if [ "$LINKLOCAL" = 1 ]; then
	if wait_for 15 has_ll && LL=$(ll_addr) &&
		wait_for 10 gid_index "$RXE" "$(ip6_gid "$LL")"; then
		ADDRS="$ADDRS $LL%$RXE_NETDEV"
		record "link-local address" pass "$LL%$RXE_NETDEV, GID[$(gid_index "$RXE" "$(ip6_gid "$LL")")]"
	else
		record "link-local address" fail "no usable link-local address on $RXE_NETDEV: $(ip -6 -o addr show dev "$RXE_NETDEV")"
	fi
fi
show_gids "$RXE"

# go_results LOG PREFIX: one check per test and subtest from `go test -v` output; skips are
# failures except for the tests that skip by design when a device is present.
go_results() {
	local log=$1 prefix=$2 line status name rest
	while IFS= read -r line; do
		case $line in
		*"--- PASS: "* | *"--- FAIL: "* | *"--- SKIP: "*) ;;
		*) continue ;;
		esac
		rest=${line#*--- }
		status=${rest%%:*}
		name=${rest#*: }
		name=${name%% (*}
		case $status in
		PASS) rest=${line##* (}; record "$prefix$name" pass "${rest%)}" ;;
		FAIL) record "$prefix$name" fail "see the console log" ;;
		SKIP)
			case $name in
			TestNoDevice | TestDeviceRemoval) record "$prefix$name" pass "skipped by design" ;;
			*) record "$prefix$name" fail "skipped" ;;
			esac
			;;
		esac
	done <"$log"
	# round-trip latencies, as logged by TestRoundTrips
	grep -o '[^ ]* [a-z-]*: 10000 round trips of 64 B: .*' "$log" | while IFS= read -r line; do
		# "ADDR MODE: 10000 round trips of 64 B: mean ..., p50 ..., p99 ..., max ..."
		record "${prefix}latency ${line%%: 10000 *}" pass "10000 ${line#*: 10000 }"
	done
}

run_tests() {
	local bin=$1 prefix=$2 log rc
	log=/tmp/$(basename "$bin").log
	step "$bin: -test.run '$RUN' against $ADDRS"
	SRPT_VERBS_ADDRS="$ADDRS" run timeout 900 "$bin" -test.v -test.count=1 -test.timeout "$TEST_TIMEOUT" \
		-test.run "$RUN" -test.skip '^TestDeviceRemoval$' 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	go_results "$log" "$prefix"
	if [ "$rc" = 0 ] && grep -q '^PASS$' "$log"; then
		record "${prefix}go test" pass "exit 0"
	else
		record "${prefix}go test" fail "exit $rc"
	fi
}

run_tests "$BIN" ""
[ -n "$RACE_BIN" ] && run_tests "$RACE_BIN" "race: "

# removal_run LABEL: TestDeviceRemoval against $RXE (it deletes the device under a live
# connection, listeners and registered memory, and adds it back), then checks that the device
# is back.
removal_run() {
	local label=$1 log rc pid tsk sc nr addr range rest
	step "$BIN: TestDeviceRemoval, $label (rdma link delete $RXE, then rdma link add)"
	log=/tmp/removal-$label.log
	echo "SRPTVM\$ $BIN -test.v -test.count=1 -test.timeout 150s -test.run '^TestDeviceRemoval\$'"
	SRPT_VERBS_ADDRS="$RXE_IP4" SRPT_VERBS_REMOVE_DEVICE="$RXE" timeout 300 "$BIN" -test.v -test.count=1 \
		-test.timeout 150s -test.run '^TestDeviceRemoval$' >"$log" 2>&1 &
	pid=$!
	if ! wait_for 120 eval "! kill -0 $pid"; then
		# hung: where every thread is, before the test's own timeout panics
		echo "SRPTVM: TestDeviceRemoval still running after 120 s; its threads:"
		for tsk in /proc/"$pid"/task/*; do
			sc=$(cat "$tsk/syscall" 2>/dev/null)
			echo "SRPTVM: -- thread ${tsk##*/}: wchan $(cat "$tsk/wchan" 2>/dev/null), syscall $sc"
			cat "$tsk/stack" 2>/dev/null
			# futex(2) on a pthread mutex: its words (lock, count, owner tid) and its mapping
			read -r nr addr _ <<<"$sc"
			if [ "$nr" = 202 ]; then
				echo "SRPTVM:    futex words: $(dd if=/proc/"$pid"/mem bs=4 count=4 iflag=skip_bytes skip=$((addr)) 2>/dev/null | od -An -tx4)"
				while read -r range rest; do
					[ $((16#${range%-*})) -le $((addr)) ] && [ $((addr)) -lt $((16#${range#*-})) ] &&
						echo "SRPTVM:    in $range $rest"
				done <"/proc/$pid/maps"
			fi
		done
	fi
	wait "$pid"
	rc=$?
	cat "$log"
	go_results "$log" "$label: "
	if [ "$rc" = 0 ] && grep -q '^PASS$' "$log"; then
		record "$label: go test" pass "exit 0; $(grep -o 'rdma link delete returned after [^ ]*' "$log" | head -1)"
	else
		record "$label: go test" fail "exit $rc"
	fi
	if [ -e "/sys/class/infiniband/$RXE" ] && wait_for 20 port_active "$RXE"; then
		record "$label: $RXE back" pass "rdma link add by the test, port active"
	else
		record "$label: $RXE back" fail "$(rdma link 2>&1 | head -2)"
		[ -e "/sys/class/infiniband/$RXE" ] || run rdma link add "$RXE" type rxe netdev "$RXE_NETDEV"
	fi
}

# nth I: " #I" when the removal runs are repeated, else nothing
nth() { [ "$REMOVAL_REPEAT" = 1 ] || echo " #$1"; }

if [ "$REMOVAL" = 1 ]; then
	# First as the only RDMA device: librdmacm never learns that the last device went away
	# (see srpt_release_cma in ib/verbs/shim.c), the case of a target with one HCA.
	for i in $(seq "$REMOVAL_REPEAT"); do
		removal_run "only device$(nth "$i")"
	done
	# Then with a second device present: librdmacm's device list keeps an entry to compare
	# (and rdma-core 44 compares them wrongly at times; see srpt_release_cma).
	step "second soft-RoCE device rxe1 on dummy1"
	if run ip link add dummy1 type dummy && run ip link set dummy1 address 02:00:00:00:00:02 &&
		run ip link set dummy1 up && run rdma link add rxe1 type rxe netdev dummy1; then
		record rxe1 pass "rxe1 on dummy1"
		for i in $(seq "$REMOVAL_REPEAT"); do
			removal_run "second device present$(nth "$i")"
		done
	else
		record rxe1 fail "could not add rxe1: the removal test ran only as the last device"
	fi
fi

problems=$(kernel_log_problems)
if [ -n "$problems" ]; then
	record "kernel log" fail "$(echo "$problems" | head -3)"
else
	record "kernel log" pass "no WARNING/BUG/Oops"
fi
finish
