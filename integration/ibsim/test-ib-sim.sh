#!/usr/bin/env bash
# test-ib-sim.sh - srptarget dm-agent and ib-discover on a simulated InfiniBand fabric: ibsim
# (one switch, three HCAs: Hsm runs OpenSM, Htgt the agent, Hini ib-discover), umad2sim (an
# LD_PRELOAD library that turns the umad devices into ibsim clients) and OpenSM, from Debian's
# ibsim-utils, libumad2sim0 and opensm. No kernel module, no VM, about half a minute.
#
#   integration/ibsim/test-ib-sim.sh        # make test-ib-sim
#
# What it checks, each a line of the result table:
#   - ib-discover asks the subnet manager (SA NodeRecord) for the GID of a LID, and says that
#     the port does not answer Device Management GETs when no agent runs there;
#   - dm-agent starts on Htgt, says the IsDeviceManagementSupported bit is clear, and answers
#     ib-discover's GETs: the add_target lines and every answer's bytes (--dump) are compared
#     with expected.txt;
#   - dm-agent stops on SIGTERM.
# Two things of the simulator shape the run (both from ibsim's sources, ibsim 0.10-0.12):
#   - ibsim hands unsolicited MADs only to clients flagged as subnet managers, so the agent
#     runs with SIM_SET_ISSM=1;
#   - umad2sim's receiver thread crashes the process when a MAD arrives for a class no agent
#     of the process registered, and OpenSM probes an issm client with SMInfo: OpenSM is
#     stopped once the subnet is up, before the agent starts (ib-discover then gets the GID
#     with --gid). The kernel's ib_umad has neither limitation.
#
# Environment: GO (default go), SRPT_IBSIM_DIR (work directory, default a new one in /tmp).
# Needs root to install the packages when they are missing.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GO=${GO:-go}
WORK=${SRPT_IBSIM_DIR:-$(mktemp -d /tmp/srpt-ibsim.XXXXXX)}
SO=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
PKGS="ibsim-utils libumad2sim0 opensm infiniband-diags"

fails=0
pids=()
record() { # record NAME pass|fail DETAIL
	printf '%-48s %-4s %s\n' "$1" "$2" "$3" | tee -a "$WORK/results"
	[ "$2" = pass ] || fails=$((fails + 1))
}
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
die() { echo "test-ib-sim: $*" >&2; exit 2; }
wait_for() { # wait_for SECONDS COMMAND...
	local i
	for ((i = 0; i < $1 * 10; i++)); do "${@:2}" && return 0; sleep 0.1; done
	return 1
}
sim() { # sim NODE COMMAND...: run COMMAND as a client of ibsim on NODE
	SIM_HOST=$1 LD_PRELOAD=$SO "${@:2}"
}

mkdir -p "$WORK/state" && cd "$WORK" || die "no work directory $WORK"
: >results
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
	echo "test-ib-sim: installing$missing"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >apt.log 2>&1 ||
		die "apt-get install$missing failed (root?): $(tail -1 apt.log)"
fi
[ -e "$SO" ] || die "no $SO"

echo "test-ib-sim: building srptarget into $WORK"
(cd "$REPO" && "$GO" build -o "$WORK/srptarget" ./cmd/srptarget) || die "go build failed"
sed "s|STATE_DIR|$WORK/state|" "$HERE/srptarget.yaml" >srptarget.yaml && chmod 600 srptarget.yaml

# ------------------------------------------------------------------ the fabric
# Processes are started directly (not through sim, a function) so that $! is their PID.
ibsim -s -n "$HERE/net" >ibsim.log 2>&1 &
simpid=$!
pids+=($simpid)
wait_for 10 grep -qs 'Network simulator ready' ibsim.log && sleep 0.5 && kill -0 $simpid 2>/dev/null ||
	die "ibsim did not start (another ibsim running? its sockets are abstract, one per host): $(tail -1 ibsim.log)"
SIM_HOST=Hsm LD_PRELOAD=$SO opensm -f "$WORK/opensm.log" >opensm.out 2>&1 &
smpid=$!
pids+=($smpid)
port_field() { sim "$1" ibstat ibsim0 1 2>/dev/null | awk -v f="$2" -F': ' '$1 ~ f { print $2 }'; }
# The subnet is up when every HCA port is Active with a LID (OpenSM's "SUBNET UP" goes to a
# buffered stdout).
subnet_up() {
	local n
	for n in Hsm Htgt Hini; do
		[ "$(port_field "$n" State)" = Active ] && [ "$(port_field "$n" 'Base lid')" != 0 ] || return 1
	done
}
if wait_for 30 subnet_up; then
	record "OpenSM: subnet up" pass "every port Active with a LID"
else
	record "OpenSM: subnet up" fail "$(tail -2 opensm.log | tr '\n' ' ')"
	exit 1
fi
TLID=$(port_field Htgt 'Base lid')
TGUID=$(port_field Htgt 'Port GUID')
TGID=$(printf 'fe80::%x:%x' $((TGUID >> 16 & 0xffff)) $((TGUID & 0xffff)))
echo "test-ib-sim: Htgt is LID $TLID, port GUID $TGUID (GID $TGID)"

# ------------------------------------------------------------------ no agent yet
sim Hini ./srptarget ib-discover --lid "$TLID" -v >discover-noagent.out 2>discover-noagent.err
rc=$?
if [ $rc = 1 ] && grep -qx "# LID $TLID: GID $TGID" discover-noagent.out &&
	grep -q "no answer from LID $TLID to Device Management GET 0x0010 (no agent of that class on the port?)" discover-noagent.err; then
	record "ib-discover: GID from the SA, no agent" pass "NodeRecord of LID $TLID: $TGID; $(cat discover-noagent.err)"
else
	record "ib-discover: GID from the SA, no agent" fail "exit $rc: $(cat discover-noagent.out discover-noagent.err | tr '\n' ' ')"
fi
kill "$smpid"
wait "$smpid" 2>/dev/null

# ------------------------------------------------------------------ the agent
SIM_HOST=Htgt SIM_SET_ISSM=1 LD_PRELOAD=$SO ./srptarget dm-agent --config srptarget.yaml --log-format console >agent.log 2>&1 &
apid=$!
pids+=($apid)
if wait_for 10 grep -q 'answering Device Management queries' agent.log &&
	grep -q 'IsDeviceManagementSupported is clear on this port' agent.log; then
	record "dm-agent: answering, says the bit is clear" pass "$(grep -c advertising agent.log) services advertised"
else
	record "dm-agent: answering, says the bit is clear" fail "$(tail -3 agent.log | tr '\n' ' ')"
fi
sim Hini ./srptarget ib-discover --lid "$TLID" --gid "$TGID" -v --dump >discover.raw 2>discover.err
rc=$?
# umad2sim hands a process at most the first 224 bytes of a MAD that arrives (its receiver
# thread allocates a buffer of its own request's size, header included) and the rest of the
# 256 is whatever its heap held: the dumps are compared on the first 160 bytes of data, which
# hold every attribute of this configuration (IOUnitInfo 132, IOControllerProfile 128, two
# service entries 96).
awk '/ data [0-9a-f]*$/ { d = substr($NF, 1, 320); sub(/(00)+$/, "", d); $NF = d } { print }' discover.raw >discover.out
sed "s|TGID_HEX|$(printf 'fe80000000000000%016x' "$TGUID")|; s|TGID_TEXT|$TGID|; s|LID_TGT|$TLID|; s|LID_INI|$(port_field Hini 'Base lid')|" \
	"$HERE/expected.txt" >expected.txt
if [ $rc = 0 ] && diff -u expected.txt discover.out >discover.diff; then
	record "ib-discover: lines and answers" pass "$(grep -c '^id_ext=' discover.out) add_target lines, $(grep -c '^# .*: header' discover.out) answers as expected.txt"
else
	record "ib-discover: lines and answers" fail "exit $rc: $(head -c 400 discover.diff) $(cat discover.err)"
fi
answered=$(grep -c 'Device Management request answered.*"status": "success"' agent.log)
if [ "$answered" = 3 ]; then
	record "dm-agent: requests answered" pass "3: IOUnitInfo, IOControllerProfile, ServiceEntries"
else
	record "dm-agent: requests answered" fail "$answered success lines in the agent's log"
fi
kill -TERM "$apid"
if wait_for 5 eval "! kill -0 $apid 2>/dev/null"; then
	wait "$apid"
	arc=$?
	if [ $arc = 0 ] && grep -q 'stopped answering Device Management queries' agent.log; then
		record "dm-agent: SIGTERM" pass "exit 0"
	else
		record "dm-agent: SIGTERM" fail "exit $arc"
	fi
else
	record "dm-agent: SIGTERM" fail "still running 5 s after SIGTERM"
fi

echo "test-ib-sim: $(grep -c ' pass ' results) passed, $fails failed; logs in $WORK"
[ $fails = 0 ]
