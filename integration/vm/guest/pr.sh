#!/bin/bash
# pr.sh - SCSI-3 persistent reservations of srptarget driven by sg_persist from
# two initiator ports of the Linux SRP initiator (integration/vm/pr.sh runs it).
#
# Two add_target lines with different initiator_ext make two I_T nexuses to
# the same LUN, each its own SCSI host and disk (A and B). Checks:
#   - A registers and reserves WRITE EXCLUSIVE - REGISTRANTS ONLY; B, not
#     registered, gets RESERVATION CONFLICT for a write and may read;
#   - B registers and may write; READ FULL STATUS (sg_persist -i -s) shows both
#     with their SRP TransportIDs (protocol 4h, the initiator port ids);
#   - A's PREEMPT AND ABORT removes B, which sees REGISTRATIONS PREEMPTED and
#     then conflicts;
#   - with APTPL (-Z) the key and reservation survive a restart of the daemon
#     (a logout, SIGTERM, a new daemon on the same state_dir, a new login);
#   - the sequence pacemaker's fence_scsi runs: unfence both (-o -I -S),
#     reserve (-o -R -T 5), fence B (-o -A -T 5), status (-i -k), unfence B.
#
# Arguments (k=v): bin=/usr/local/bin/srptarget port=5555

# Functions below are called through check and wait_for:
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
PORT=$(arg port 5555)
CONFIG=/etc/srptarget-pr.yaml
STATE_DIR=/var/lib/srptarget-pr
SERIAL=5e2e00pr00
ID_EXT=0002c90300a0b0c1
EXT_A=0000000000000001
EXT_B=0000000000000002
KEY_A=0xa1
KEY_B=0xb2
DLOG=/tmp/srptarget-pr.log
PID=

daemon_alive() { [ -n "$PID" ] && [ -r "/proc/$PID/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$PID/stat"; }
listening() { daemon_alive && cm_listening "$PORT"; }

start_daemon() {
	echo "SRPTVM\$ $BIN serve --config $CONFIG"
	"$BIN" serve --config "$CONFIG" >>"$DLOG" 2>&1 &
	PID=$!
	wait_for 30 listening
}

stop_daemon() {
	kill -TERM "$PID"
	wait_for 45 eval '! daemon_alive'
	wait "$PID"
}

more_srp_disks() { [ "$(srp_disks | wc -l)" -gt "$1" ]; }

# login_one EXT: log in with initiator_ext EXT and print the new disk (/dev/sdX).
# ib_srp has no initiator_ext attribute, so the logins are made one at a time and
# the new disk is the one that was not there before.
login_one() {
	local ext=$1 before
	before=$(srp_disks | tr '\n' ' ')
	# (its output to stderr: stdout is the disk's name)
	srp_login "id_ext=$ID_EXT,ioc_guid=$ID_EXT,dest=$RXE_IP4:$PORT,initiator_ext=$ext" >&2 || return 1
	wait_for 60 more_srp_disks "$(wc -w <<<"$before")" || return 1
	sleep 1
	local d
	for d in $(srp_disks); do
		case " $before " in *" $d "*) ;; *) echo "/dev/$d"; return 0 ;; esac
	done
	return 1
}

# write_status / read_status DEV: WRITE(10) or READ(10) of one block at LBA 8 with sg_raw,
# whose output names the SCSI status and sense; "exit N" is its exit status (0 for GOOD,
# 24 for RESERVATION CONFLICT).
raw() {
	local rc
	sg_raw -v "$@" >/tmp/raw.txt 2>&1
	rc=$?
	echo "exit $rc: $(grep -iE 'status|sense' /tmp/raw.txt | tr '\n' ' ' | sed 's/  */ /g')"
}
write_status() { raw -s 512 -i /dev/zero "$1" 2a 00 00 00 00 08 00 00 01 00; }
read_status() { raw -r 512 "$1" 28 00 00 00 00 08 00 00 01 00; }
conflicts() { write_status "$1" | grep -qiE '^exit 24|reservation conflict'; }
good() { grep -q '^exit 0:' <<<"$1" && ! grep -qi 'conflict' <<<"$1"; }
keys() { sg_persist -n -i -k "$1" 2>&1 | awk '$1 ~ /^0x/ { print $1 }' | sort | tr '\n' ' ' | sed 's/ $//'; }
reservation() { sg_persist -n -i -r "$1" 2>&1 | tr '\n' ' ' | sed 's/  */ /g'; }

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup failed"

mkdir -p "$STATE_DIR"
cat >"$CONFIG" <<EOF
target:
  id_ext: "$ID_EXT"
listeners:
  - address: $RXE_IP4
    port: $PORT
state_dir: $STATE_DIR
luns:
  - lun: 0
    backstore: memory
    size: 64MiB
    serial: "$SERIAL"
acls:
  - initiators: ["*"]
    luns: [0]
EOF
cat "$CONFIG"

step "srptarget serve"
start_daemon || fail "srptarget is not listening: $(tail -5 "$DLOG")"
record "daemon listening" pass "pid $PID"

step "two initiator ports"
A=$(login_one "$EXT_A") || fail "login with initiator_ext=$EXT_A failed"
B=$(login_one "$EXT_B") || fail "login with initiator_ext=$EXT_B failed"
record "two I_T nexuses" pass "initiator_ext $EXT_A: $A, $EXT_B: $B"
sg_turs "$A" >/dev/null 2>&1
sg_turs "$B" >/dev/null 2>&1
run sg_persist -n -i -c "$A"

step "register A, reserve WRITE EXCLUSIVE - REGISTRANTS ONLY"
check "A registers" sg_persist -n -o -G -S "$KEY_A" "$A"
check "A reserves type 5" sg_persist -n -o -R -K "$KEY_A" -T 5 "$A"
check_eq "keys (READ KEYS from B)" "$KEY_A" "$(keys "$B")"
out=$(write_status "$B")
echo "$out"
if grep -qi 'reservation conflict' <<<"$out"; then
	record "unregistered B write conflicts" pass "$(head -1 <<<"$out")"
else
	record "unregistered B write conflicts" fail "sg_raw WRITE(10): $out"
fi
out=$(read_status "$B")
if good "$out"; then
	record "unregistered B may read" pass "$(head -1 <<<"$out")"
else
	record "unregistered B may read" fail "sg_raw READ(10): $out"
fi

step "register B"
check "B registers" sg_persist -n -o -G -S "$KEY_B" "$B"
out=$(write_status "$B")
if good "$out"; then record "registered B writes" pass "$out"; else record "registered B writes" fail "$out"; fi
run sg_persist -n -i -s "$A" | tee /tmp/full.txt
# sg_persist names protocol 4h's TransportID "RDMA initiator port identifier" and dumps its
# 16 bytes on the next line: initiator_ext first.
n=$(grep -ci 'RDMA initiator port identifier' /tmp/full.txt)
ids=$(grep -iA1 'RDMA initiator port identifier' /tmp/full.txt | grep -io "00 00 00 00 00 00 00 0[12]" | sort -u | wc -l)
if [ "$n" = 2 ] && [ "$ids" = 2 ]; then
	record "READ FULL STATUS: SRP TransportIDs" pass "$n SRP TransportIDs, initiator_ext 1 and 2; $(grep -i -m1 -A1 'RDMA initiator' /tmp/full.txt | tr '\n' ' ' | sed 's/  */ /g')"
else
	record "READ FULL STATUS: SRP TransportIDs" fail "$n SRP TransportID lines, $ids initiator_ext seen: $(tr '\n' ' ' </tmp/full.txt | sed 's/  */ /g' | cut -c1-300)"
fi

step "A preempts and aborts B"
check "A PREEMPT AND ABORT" sg_persist -n -o -A -K "$KEY_A" -S "$KEY_B" -T 5 "$A"
out=$(raw "$B" 00 00 00 00 00 00)
cat /tmp/raw.txt
if grep -qi 'registrations preempted' <<<"$out"; then
	record "B sees REGISTRATIONS PREEMPTED" pass "$(grep -i -m1 'registrations preempted' <<<"$out" | sed 's/^ *//')"
else
	record "B sees REGISTRATIONS PREEMPTED" fail "TEST UNIT READY: $(tr '\n' ' ' <<<"$out" | cut -c1-300)"
fi
if conflicts "$B"; then record "preempted B write conflicts" pass "RESERVATION CONFLICT"; else record "preempted B write conflicts" fail "$(write_status "$B")"; fi
check_eq "keys after preempt" "$KEY_A" "$(keys "$A")"

step "APTPL across a daemon restart"
check "A registers with APTPL" sg_persist -n -o -G -K "$KEY_A" -S "$KEY_A" -Z "$A"
f=$STATE_DIR/pr-$SERIAL.json
if [ -s "$f" ]; then record "state file written" pass "$f: $(tr -d ' \n' <"$f" | cut -c1-200)"; else record "state file written" fail "no $f"; fi
res_before=$(reservation "$A")
CHECK_DETAIL="both disks removed" check "logout" srp_logout
if stop_daemon; then record "daemon stopped" pass "SIGTERM, exit 0"; else record "daemon stopped" fail "exit status $?"; fi
start_daemon || fail "srptarget did not restart: $(tail -5 "$DLOG")"
A=$(login_one "$EXT_A") || fail "login after restart failed"
sg_turs "$A" >/dev/null 2>&1
check_eq "keys after restart" "$KEY_A" "$(keys "$A")"
check_eq "reservation after restart" "$res_before" "$(reservation "$A")"
if grep -q 'persistent reservations restored' "$DLOG"; then
	record "daemon restored the state" pass "$(grep -m1 'persistent reservations restored' "$DLOG" | cut -c1-200)"
else
	record "daemon restored the state" fail "no log line"
fi
B=$(login_one "$EXT_B") || fail "login B after restart failed"
sg_turs "$B" >/dev/null 2>&1

step "fence_scsi's sequence"
check "clear" sg_persist -n -o -C -K "$KEY_A" "$A"
check "unfence A (-o -I -S)" sg_persist -n -o -I -S "$KEY_A" "$A"
check "unfence B (-o -I -S)" sg_persist -n -o -I -S "$KEY_B" "$B"
check "reserve (-o -R -T 5)" sg_persist -n -o -R -K "$KEY_A" -T 5 "$A"
check_eq "status (-i -k)" "$KEY_A $KEY_B" "$(keys "$A")"
check "fence B (-o -A -T 5)" sg_persist -n -o -A -K "$KEY_A" -S "$KEY_B" -T 5 "$A"
check_eq "status after fencing (-i -k)" "$KEY_A" "$(keys "$A")"
sg_turs "$B" >/dev/null 2>&1
if conflicts "$B"; then record "fenced B cannot write" pass "RESERVATION CONFLICT"; else record "fenced B cannot write" fail "$(write_status "$B")"; fi
check "unfence B again" sg_persist -n -o -I -S "$KEY_B" "$B"
out=$(write_status "$B")
if good "$out"; then record "unfenced B writes" pass "$out"; else record "unfenced B writes" fail "$out"; fi
check_eq "final keys" "$KEY_A $KEY_B" "$(keys "$A")"

srp_logout
stop_daemon
if grep -qE 'ERROR|FATAL|panic' "$DLOG"; then
	record "daemon log" fail "$(grep -m1 -E 'ERROR|FATAL|panic' "$DLOG" | cut -c1-200)"
else
	record "daemon log" pass "no error lines"
fi
finish
