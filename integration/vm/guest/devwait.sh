#!/bin/bash
# devwait.sh - boot order: srptarget serve starts before any RDMA module is loaded
# (no rdma_rxe, no ib_uverbs, no rdma_ucm: as when systemd starts it before the
# adapter's driver), says that it waits, and listens without being told once
# setup_rxe has made rxe0 and its address; ib_srp then logs in, and SIGTERM
# stops it with status 0. A second instance, configured for an address rxe0's
# netdev does not have, waits without retrying until `ip addr add` gives it the
# address, then listens; a third one is stopped by SIGTERM while it waits; a fourth one,
# whose start fails when the device appears (a LUN's directory removed after the first
# stage), stays up, says why, and starts on `srptarget reload` once the directory is back. Run on
# the host:
#   go build -o /tmp/srptarget-vm/bin/srptarget ./cmd/srptarget
#   SRPT_VM_FILES="/tmp/srptarget-vm/bin/srptarget:/usr/local/bin/srptarget" \
#     integration/vm/run-vm.sh integration/vm/guest/devwait.sh
. /lab/lib.sh

BIN=/usr/local/bin/srptarget
CONFIG=/etc/srptarget/srptarget.yaml
PORT=5555
DLOG=/var/log/srptarget-devwait.log
mkdir -p /etc/srptarget /var/log
# The listener names the address rxe0 gets later: the wait covers both the
# device and the address. No target identity: it comes from rxe0's node GUID.
cat >"$CONFIG" <<CFG
listeners:
  - address: 169.254.50.1
    port: $PORT
luns:
  - lun: 0
    backstore: memory
    size: 64MiB
acls:
  - initiators: ["*"]
    luns: [0]
CFG
chmod 0644 "$CONFIG"

step "srptarget serve before any RDMA module"
check "no RDMA module loaded" sh -c '! grep -qE "^(rdma_rxe|ib_uverbs|rdma_ucm) " /proc/modules'
"$BIN" serve >"$DLOG" 2>&1 &
PID=$!
tail -n +1 -f "$DLOG" 2>/dev/null | awk '{ print "srptarget[1]| " $0; fflush() }' &
TAILPID=$!
if wait_for 10 grep -q "no RDMA device yet: waiting for one" "$DLOG"; then
	record "waits for a device (default --config)" pass "$(grep -c . "$DLOG") log lines"
else
	record "waits for a device (default --config)" fail "$(tail -3 "$DLOG")"
fi
sleep 2
check "still running after 2 s" kill -0 "$PID"

step "setup_rxe: rdma_rxe, rxe0, 169.254.50.1"
t0=$(uptime_s)
setup_rxe || fail "setup_rxe"
if wait_for 15 cm_listening "$PORT"; then
	record "listens once rxe0 is up" pass "$(since "$t0") s after setup_rxe began, no reload"
else
	record "listens once rxe0 is up" fail "$(tail -5 "$DLOG")"
fi

step "ib_srp login"
have_disk() { [ -n "$(srp_disks)" ]; }
if srp_login "id_ext=$RXE_GUID,ioc_guid=$RXE_GUID,dest=$RXE_IP4:$PORT" && wait_for 20 have_disk; then
	record "ib_srp login after the wait" pass "disk $(srp_disks)"
else
	record "ib_srp login after the wait" fail "$(tail -5 "$DLOG")"
fi
srp_logout || true

step "SIGTERM"
kill -TERM "$PID"
wait "$PID"
check_eq "exit status after SIGTERM" 0 "$?"

step "second instance: rxe0 is up but not the listener's address"
sed -i 's/169.254.50.1/169.254.77.7/' "$CONFIG"
"$BIN" serve >"$DLOG.2" 2>&1 &
PID=$!
if wait_for 10 grep -q "no RDMA device has the address of this listener yet" "$DLOG.2"; then
	record "waits for a listener's address" pass "$(grep -m1 'no RDMA device has the address of this listener yet' "$DLOG.2" | cut -c1-160)"
else
	record "waits for a listener's address" fail "$(tail -3 "$DLOG.2")"
fi
sleep 3
check_eq "no new attempt while nothing changes" 1 "$(grep -c 'no RDMA device has the address of this listener yet' "$DLOG.2")"
t0=$(uptime_s)
run ip addr add 169.254.77.7/16 dev "$RXE_NETDEV"
if wait_for 10 cm_listening "$PORT"; then
	record "listens once the address is added" pass "$(since "$t0") s, no reload"
else
	record "listens once the address is added" fail "$(tail -5 "$DLOG.2")"
fi
kill -TERM "$PID"
wait "$PID"
check_eq "exit status after SIGTERM (second instance)" 0 "$?"
sed 's/^/srptarget[2]| /' "$DLOG.2"

step "third instance: SIGTERM ends the wait"
sed -i 's/169.254.77.7/169.254.88.8/' "$CONFIG"
"$BIN" serve >"$DLOG.3" 2>&1 &
PID=$!
wait_for 10 grep -q "no RDMA device has the address of this listener yet" "$DLOG.3" || record "third instance waits" fail "$(tail -3 "$DLOG.3")"
t0=$(uptime_s)
kill -TERM "$PID"
wait "$PID"
rc=$?
check_eq "SIGTERM while waiting: exit status" 0 "$rc"
record "SIGTERM while waiting: prompt" "$(awk -v s="$(since "$t0")" 'BEGIN { print (s < 2) ? "pass" : "fail" }')" "$(since "$t0") s"
sed 's/^/srptarget[3]| /' "$DLOG.3"

step "fourth instance: the start fails when the device appears; a reload starts it"
# No identity again, so the second stage runs when rxe0 comes back; LUN 1's directory is
# there for the first stage and gone when the device appears.
run rdma link delete "$RXE"
wait_for 10 sh -c "[ ! -e /sys/class/infiniband/$RXE ]" || record "rxe0 deleted" fail "$(ls /sys/class/infiniband)"
mkdir -p -m 0700 /srv/devwait/luns
cat >"$CONFIG" <<CFG
listeners:
  - address: 169.254.50.1
    port: $PORT
luns:
  - lun: 0
    backstore: memory
    size: 64MiB
  - lun: 1
    backstore: file
    path: /srv/devwait/luns/lun1.img
    size: 16MiB
    create: true
acls:
  - initiators: ["*"]
    luns: [0, 1]
CFG
"$BIN" serve >"$DLOG.4" 2>&1 &
PID=$!
wait_for 10 grep -q "no RDMA device yet: waiting for one" "$DLOG.4" &&
	record "waits for a device (fourth instance)" pass "LUN 1's directory checked" ||
	record "waits for a device (fourth instance)" fail "$(tail -3 "$DLOG.4")"
run rmdir /srv/devwait/luns
run rdma link add "$RXE" type rxe netdev "$RXE_NETDEV"
if wait_for 15 grep -q "the start failed once an RDMA device appeared" "$DLOG.4"; then
	record "the late start fails with the reason" pass "$(grep -m1 'luns\[1\].path' "$DLOG.4" | cut -c1-160)"
else
	record "the late start fails with the reason" fail "$(tail -5 "$DLOG.4")"
fi
check "still running after the failed start" kill -0 "$PID"
"$BIN" status >/tmp/devwait-status.txt 2>&1
check_eq "status exits 4 after the failed start" 4 "$?"
run mkdir -m 0700 /srv/devwait/luns
out=$("$BIN" reload 2>&1)
check_eq "srptarget reload after the fix: exit status" 0 "$?"
echo "$out"
if wait_for 15 cm_listening "$PORT"; then
	record "listens after the reload" pass "$(grep -c . "$DLOG.4") log lines"
else
	record "listens after the reload" fail "$(tail -5 "$DLOG.4")"
fi
two_disks() { [ "$(srp_disks | wc -l)" = 2 ]; }
if srp_login "id_ext=$RXE_GUID,ioc_guid=$RXE_GUID,dest=$RXE_IP4:$PORT" && wait_for 20 two_disks; then
	record "ib_srp login after the late start" pass "disks $(echo $(srp_disks))"
else
	record "ib_srp login after the late start" fail "disks: $(echo $(srp_disks)); $(tail -5 "$DLOG.4")"
fi
check "LUN 1's file made by the late start" test -f /srv/devwait/luns/lun1.img
srp_logout || true
kill -TERM "$PID"
wait "$PID"
check_eq "exit status after SIGTERM (fourth instance)" 0 "$?"
sed 's/^/srptarget[4]| /' "$DLOG.4"
kill "$TAILPID" 2>/dev/null
finish
