#!/bin/bash
# demo.sh - a short demonstration inside the test VM: srptarget serves a
# configuration (configs/demo.yaml, passed in by integration/vm/demo.sh) with
# --metrics, the Linux SRP initiator logs in with the line `srptarget login-line`
# prints, and lsblk, sg_inq and a short fio run show the disks. While fio runs the
# operator's side is shown: status, sessions, luns, stats, reload --dry-run and
# /metrics; after it, the initiator's counters (commands, bytes each way) are
# checked against fio's own I/O counts, and validate --diff previews a change that
# would lose the RAM disk's data. Then logout and SIGTERM.
#
#   SRPT_VM_FILES="bin/srptarget:/usr/local/bin/srptarget configs/demo.yaml:/etc/srptarget/demo.yaml" \
#     integration/vm/run-vm.sh integration/vm/guest/demo.sh
#
# Everything meant for the viewer is printed with the prefix "DEMO| " (the host
# script shows only those lines); the kernel's console messages are turned
# off while it runs (they are in the log: dmesg is printed at the end).
#
# Arguments (k=v): bin=/usr/local/bin/srptarget config=/etc/srptarget/demo.yaml
#   fio_runtime=5, listen_timeout=30
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
CONFIG=$(arg config /etc/srptarget/demo.yaml)
FIO_RUNTIME=$(arg fio_runtime 5)
LISTEN_TIMEOUT=$(arg listen_timeout 30)
DLOG=/tmp/srptarget.log

say() { echo "DEMO| $*"; }
# show CMD...: the command, then its output, for the viewer.
show() {
	say "# $*"
	"$@" 2>&1 | sed 's/^/DEMO|   /'
	return "${PIPESTATUS[0]}"
}

dmesg -n 1
[ -x "$BIN" ] || fail "no $BIN: integration/vm/demo.sh builds and passes it"
[ -f "$CONFIG" ] || fail "no $CONFIG"

step "soft-RoCE"
setup_rxe >/tmp/rxe.txt 2>&1 || { cat /tmp/rxe.txt; fail "soft-RoCE setup"; }
say "soft-RoCE: rxe0 on dummy0, $RXE_IP4 and $RXE_IP6, node GUID $RXE_GUID (target and initiator in this VM)"
record rxe pass "rxe0 on $RXE_NETDEV"

step "srptarget"
# serve refuses a configuration file that its group or others can write; the copy run-vm.sh
# made keeps the mode of the host's file, which a umask of 002 leaves group-writable.
chmod go-w "$CONFIG"
say ""
show cat "$CONFIG"
say ""
METRICS=127.0.0.1:9464
say "# srptarget serve --config $CONFIG --metrics $METRICS &"
"$BIN" serve --config "$CONFIG" --metrics "$METRICS" >"$DLOG" 2>&1 &
PID=$!
tail -n +1 -f "$DLOG" 2>/dev/null | awk '{ print "DEMO|   srptarget: " $0; fflush() }' &
TAILPID=$!
port=$(awk '/port:/ {print $2; exit}' "$CONFIG")
PORT=$port # lib.sh's listening
if wait_for "$LISTEN_TIMEOUT" listening; then
	record "srptarget listening" pass "port $port"
else
	sleep 1
	fail "srptarget is not listening on port $port"
fi
sleep 0.5
say ""
show "$BIN" login-line --config "$CONFIG"
line=$("$BIN" login-line --config "$CONFIG" | grep -m1 "dest=$RXE_IP4:")
opts=$(sed -n 's/^echo "\([^"]*\)".*/\1/p' <<<"$line")
[ -n "$opts" ] || fail "no add_target line for $RXE_IP4 in the login-line output"

step "ib_srp login"
{ modprobe sd_mod && modprobe sg && modprobe ib_srp; } || fail "modprobe ib_srp"
say ""
say "# echo \"$opts\" > /sys/class/infiniband_srp/srp-rxe0-1/add_target"
n0=$(dmesg_mark)
if ! echo "$opts" >/sys/class/infiniband_srp/srp-rxe0-1/add_target; then
	fail "add_target failed"
fi
nluns=$(grep -c -- '- lun:' "$CONFIG")
enough() { [ "$(srp_disks | wc -l)" -ge "$nluns" ]; }
wait_for 60 enough || fail "not $nluns disks after 60 s"
sleep 1
record "srp login" pass "$(srp_disks | tr '\n' ' ')"
say "kernel log of the login:"
dmesg_since "$n0" | grep -E 'ib_srp|scsi|sd ' | grep -v 'speed is unknown' | sed 's/^/DEMO|   /'

step "disks"
say ""
# (no udev in the VM: lsblk's SERIAL and WWN columns would be empty)
show lsblk -o NAME,SIZE,TYPE,VENDOR,MODEL,REV,HCTL,PHY-SEC,LOG-SEC,DISC-MAX
for d in $(srp_disks); do
	say ""
	show sg_inq "/dev/$d"
done
first=/dev/$(srp_disks | head -1)
say ""
show sg_readcap -l "$first"

# metrics: /metrics as Prometheus scrapes it (the image has no curl: bash's /dev/tcp).
metrics() {
	exec 3<>"/dev/tcp/${METRICS%:*}/${METRICS#*:}" || return 1
	printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$METRICS" >&3
	sed '1,/^\r$/d' <&3
	exec 3<&-
}
# series NAME LABELS: the value of one series of /metrics (0 when absent).
# (The exposition writes large values as 2.86819e+06; awk prints them whole.)
series() { metrics | awk -v want="$1{$2}" '$1 == want { printf "%.0f\n", $2; found = 1 } END { if (!found) print 0 }'; }
lun0_series() { echo "acl=\"demo-hosts\",initiator=\"$INITIATOR\",lun=\"$(disk_lun "${first#/dev/}")\""; }

step "fio, and the operator's side meanwhile"
INITIATOR=$("$BIN" sessions --json | sed -n 's/^ *"initiator": "\(0x[0-9a-f]*\)".*/\1/p' | head -1)
say ""
say "initiator port $INITIATOR; the disk $first is LUN $(disk_lun "${first#/dev/}")"
before_cmds=$(series srptarget_initiator_commands_total "$(lun0_series)")
before_read=$(series srptarget_initiator_read_bytes_total "$(lun0_series)")
before_written=$(series srptarget_initiator_written_bytes_total "$(lun0_series)")
say ""
say "# ${FIO_RUNTIME} s of 4 KiB random reads and writes, iodepth 16, crc32c verified"
fio_cmd=(fio --name=demo --filename="$first" --direct=1 --ioengine=libaio --rw=randrw --bs=4k
	--iodepth=16 --size=128M --time_based --runtime="$FIO_RUNTIME" --verify=crc32c
	--verify_backlog=256 --verify_fatal=1 --eta=never)
say "# ${fio_cmd[*]} &"
"${fio_cmd[@]}" >/tmp/fio.txt 2>&1 &
FIOPID=$!
sleep $((FIO_RUNTIME / 2 > 0 ? FIO_RUNTIME / 2 : 1))
say ""
say "while fio runs:"
show "$BIN" status
show "$BIN" sessions
show "$BIN" luns
show "$BIN" stats
show "$BIN" reload --dry-run
say "# curl -s http://$METRICS/metrics | grep -E '^srptarget_(initiator|lun_commands|logins)'"
metrics | grep -E '^srptarget_(initiator_|lun_commands_total|logins_(accepted|rejected)_total)' | sed 's/^/DEMO|   /'
wait "$FIOPID"
frc=$?
cat /tmp/fio.txt # all of it in the log, the summary for the viewer
grep -E 'err=|^ +(read|write):|issued rwts|^ +(READ|WRITE):' /tmp/fio.txt | sed 's/^/DEMO|   /'
if [ $frc = 0 ]; then record fio pass "$FIO_RUNTIME s randrw"; else record fio fail "exit $frc"; fi

step "the initiator's counters against fio's"
# fio: "issued rwts: total=READS,WRITES,TRIMS,0": every I/O it issued, its verify reads
# included, each 4 KiB. The target counts each command of the initiator on that LUN.
rw=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' /tmp/fio.txt | head -1)
fio_reads=${rw% *} fio_writes=${rw#* }
d_cmds=$(($(series srptarget_initiator_commands_total "$(lun0_series)") - before_cmds))
d_read=$(($(series srptarget_initiator_read_bytes_total "$(lun0_series)") - before_read))
d_written=$(($(series srptarget_initiator_written_bytes_total "$(lun0_series)") - before_written))
say ""
say "fio issued $fio_reads reads and $fio_writes writes of 4 KiB; the target counted for initiator $INITIATOR on that LUN:"
say "  $d_cmds commands, $d_read bytes read, $d_written bytes written"
check_eq "initiator commands = fio's reads + writes" "$((fio_reads + fio_writes))" "$d_cmds"
check_eq "initiator bytes read = fio's reads x 4 KiB" "$((fio_reads * 4096))" "$d_read"
check_eq "initiator bytes written = fio's writes x 4 KiB" "$((fio_writes * 4096))" "$d_written"
say ""
show "$BIN" sessions
show "$BIN" stats

step "a reload's preview"
# A candidate configuration halves the RAM disk: validate --diff shows what would change,
# key by key, and that its data would be lost; nothing is applied.
awk '/size: 1GiB/ && !done { sub(/1GiB/, "512MiB"); done = 1 } { print }' "$CONFIG" >/tmp/candidate.yaml
chmod go-w /tmp/candidate.yaml
say ""
show diff "$CONFIG" /tmp/candidate.yaml
show "$BIN" validate --config /tmp/candidate.yaml --diff
if "$BIN" validate --config /tmp/candidate.yaml --diff 2>&1 | grep -q 'warning: data lost: LUN 0'; then
	record "reload preview: data loss" pass "LUN 0 resized"
else
	record "reload preview: data loss" fail "no data-loss warning"
fi

step "logout and stop"
say ""
for p in /sys/class/srp_remote_ports/*; do
	say "# echo 1 > $p/delete"
	echo 1 >"$p/delete"
done
if wait_for 30 no_srp_disks; then record logout pass "disks removed"; else record logout fail "disks remain"; fi
say "# kill -TERM $PID"
kill -TERM "$PID"
wait_for 45 eval '! daemon_alive'
wait "$PID"
drc=$?
sleep 1.5 # tail -f polls once a second: let it show the daemon's last lines
kill "$TAILPID" 2>/dev/null
say "srptarget exited with status $drc"
if [ $drc = 0 ]; then record "srptarget SIGTERM" pass "exit 0"; else record "srptarget SIGTERM" fail "exit $drc"; fi
echo "SRPTVM: ---- kernel log"
dmesg | grep -v 'speed is unknown' | tail -60
finish
