# lib.sh - helpers for guest test scripts of the srptarget VM (bash).
# run-vm.sh puts it at /lab/lib.sh; a test script starts with `. /lab/lib.sh`.
#
# Results: every check appends one line "name|pass|detail" or "name|fail|detail"
# to $SRPTVM_RESULTS; /init prints the table between the markers
#   SRPTVM: ---- results begin ... / SRPTVM: ---- results end
# after the test, whatever way the test ended, and run-vm.sh shows it on the host.
#
#   arg NAME DEFAULT          value of NAME=... given to run-vm.sh
#   step TEXT                 a progress marker (shown live on the host)
#   run CMD...                echo the command, then run it
#   record NAME pass|fail DETAIL
#   check NAME CMD...         run CMD, record pass or fail (with its exit code)
#   check_eq NAME WANT GOT    record pass if WANT = GOT
#   fail TEXT                 record a failure, show the kernel log's tail, exit 1
#   finish                    exit 0 if every recorded check passed (and there was one)
#   wait_for SECS CMD...      poll CMD every 0.2 s until it succeeds
#   setup_rxe                 soft-RoCE rxe0 on dummy0 with IPv4 + IPv6 addresses
#   gid_index RXE GID         index of GID in port 1's GID table
#   cm_listening PORT         an RDMA/CM id is listening on PORT
#   pid_alive PID             the process runs (a zombie counts as gone)
#   daemon_alive              pid_alive $PID (the daemon the script started last)
#   listening                 daemon_alive, and an RDMA/CM id listens on $PORT
#   tcp_listening PORT        a TCP socket is listening on PORT
#   srp_login OPTS            ib_srp add_target with OPTS (id_ext=...,dest=IP:PORT);
#                             ib_srp parameters from the srp_params argument
#   srp_disks                 sd* disks whose SCSI host is an ib_srp host
#   disk_host sdX             the disk's SCSI host (hostN)
#   disk_lun sdX              the disk's LUN (the L of H:C:T:L)
#   srp_disk_for_lun L        the ib_srp disk (sdX) with LUN L
#   srp_disk_of ID_EXT        the ib_srp disk (sdX) of the SRP target port with that id_ext
#   disk_ios sdX|dm-N         completed reads + writes of a block device
#   mpath_setup OUT DISK...   one dm-multipath map over DISK... without udev or multipathd;
#                             multipath -ll in OUT, sets MPNAME and MPDEV
#   inq_id DEV                VENDOR/PRODUCT of a SCSI device (sg_inq)
#   srp_logout                delete every SRP remote port, wait for the disks to go
#   dmesg_mark, dmesg_since MARK  kernel log lines logged after a point
#   srp_transport_errors MARK ib_srp errors/reconnects, rxe errors since MARK
#   kernel_log_problems       WARNING/BUG/Oops/... lines in the kernel log
#   record_kernel_log         record "kernel log": pass without such lines, else fail

SRPTVM_RESULTS=${SRPTVM_RESULTS:-/run/srptvm/results}
mkdir -p "$(dirname "$SRPTVM_RESULTS")"

arg() {
	local line
	if [ -f /lab/args ]; then
		while IFS= read -r line; do
			case $line in "$1="*) echo "${line#"$1"=}"; return 0 ;; esac
		done </lab/args
	fi
	echo "$2"
}

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# since T0: seconds (one decimal) from uptime T0 until now.
since() { awk -v a="$1" -v b="$(uptime_s)" 'BEGIN { printf "%.1f", b - a }'; }

step() { echo "SRPTVM: ---- $* (uptime $(uptime_s))"; }

run() { echo "SRPTVM\$ $*"; "$@"; }

record() {
	local name=$1 status=$2
	shift 2
	local detail="$*"
	# one line per check; '|' separates the columns
	detail=${detail//|/\/}
	detail=${detail//$'\n'/ }
	name=${name//|/\/}
	echo "$name|$status|$detail" >>"$SRPTVM_RESULTS"
	echo "SRPTVM: check $name: $status${detail:+ ($detail)}"
}

# check NAME CMD...: the detail is "exit N" on failure; $CHECK_DETAIL, if the
# caller sets it before, is used as the detail on success.
check() {
	local name=$1 rc
	shift
	run "$@"
	rc=$?
	if [ $rc = 0 ]; then
		record "$name" pass "${CHECK_DETAIL:-ok}"
	else
		record "$name" fail "exit $rc: $*"
	fi
	CHECK_DETAIL=
	return $rc
}

check_eq() {
	if [ "$2" = "$3" ]; then
		record "$1" pass "$3"
	else
		record "$1" fail "want '$2', got '$3'"
		return 1
	fi
}

fail() {
	record abort fail "$*"
	echo "SRPTVM: FAIL: $*"
	echo "SRPTVM: ---- kernel log (tail)"
	dmesg | grep -v 'speed is unknown' | tail -40
	exit 1
}

finish() {
	if grep -q '^[^|]*|fail|' "$SRPTVM_RESULTS"; then exit 1; fi
	grep -q '|' "$SRPTVM_RESULTS" || exit 1
	exit 0
}

# dstat NAME: the counter NAME of the running daemon, read from its control socket
# (srptarget stats; the default socket /run/srptarget/control.sock), empty when it does not
# answer. Checks count with it rather than by grepping the daemon's log, whose wording may change.
dstat() { "${BIN:-/usr/local/bin/srptarget}" stats 2>/dev/null | awk -v n="$1" '$1 == n { print $2 }'; }

wait_for() {
	local secs=$1 end
	shift
	end=$(awk -v t="$(uptime_s)" -v s="$secs" 'BEGIN { print t + s }')
	while ! "$@" >/dev/null 2>&1; do
		awk -v t="$(uptime_s)" -v e="$end" 'BEGIN { exit !(t >= e) }' && return 1
		sleep 0.2
	done
}

# ------------------------------------------------------------------ soft-RoCE
# setup_rxe: rdma_rxe on a dummy netdev. The fixed MAC makes the rxe node GUID
# (and so the SRP target identifiers derived from it) the same on every boot;
# the IPv6 address is added with nodad so that it is usable at once (a
# tentative address cannot be bound by RDMA/CM).
# Sets RXE, RXE_NETDEV, RXE_IP4, RXE_IP6 (addresses without prefix),
# RXE_GUID (node GUID, 16 hex digits), RXE_GID4 and RXE_GID6 (GID indexes).
# Arguments (run-vm.sh k=v): netdev=dummy0 mac=02:00:00:00:00:01
#   ip4=169.254.50.1/16 ip6=fd53:5250::1/64
# shellcheck disable=SC2034 # the RXE_* variables are for the test scripts
setup_rxe() {
	RXE=rxe0
	RXE_NETDEV=$(arg netdev dummy0)
	local mac ip4 ip6
	mac=$(arg mac 02:00:00:00:00:01)
	ip4=$(arg ip4 169.254.50.1/16)
	ip6=$(arg ip6 fd53:5250::1/64)
	RXE_IP4=${ip4%/*}
	RXE_IP6=${ip6%/*}
	modprobe rdma_rxe || return 1
	modprobe ib_uverbs && modprobe rdma_ucm || return 1
	case $RXE_NETDEV in
	dummy*)
		# numdummies=0: else the module creates dummy0 itself
		modprobe dummy numdummies=0 || return 1
		[ -e "/sys/class/net/$RXE_NETDEV" ] || run ip link add "$RXE_NETDEV" type dummy || return 1
		;;
	esac
	run ip link set "$RXE_NETDEV" address "$mac" || return 1
	run ip link set "$RXE_NETDEV" up || return 1
	run ip addr add "$ip4" dev "$RXE_NETDEV" || return 1
	run ip -6 addr add "$ip6" dev "$RXE_NETDEV" nodad || return 1
	run rdma link add "$RXE" type rxe netdev "$RXE_NETDEV" || return 1
	run rdma link show "$RXE/1"
	wait_for 10 port_active "$RXE" || { echo "$RXE: port not active"; return 1; }
	RXE_GUID=$(tr -d : <"/sys/class/infiniband/$RXE/node_guid")
	wait_for 10 gid_index "$RXE" "$(ip4_gid "$RXE_IP4")" || { echo "$RXE: no GID for $RXE_IP4"; return 1; }
	wait_for 10 gid_index "$RXE" "$(ip6_gid "$RXE_IP6")" || { echo "$RXE: no GID for $RXE_IP6"; return 1; }
	RXE_GID4=$(gid_index "$RXE" "$(ip4_gid "$RXE_IP4")")
	RXE_GID6=$(gid_index "$RXE" "$(ip6_gid "$RXE_IP6")")
	show_gids "$RXE"
}

port_active() { grep -q ACTIVE "/sys/class/infiniband/$1/ports/1/state"; }

# ip4_gid A.B.C.D: the IPv4-mapped GID in sysfs form (0000:...:ffff:a9fe:3201).
ip4_gid() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# ip6_gid ADDR: the IPv6 address fully expanded in sysfs GID form.
ip6_gid() {
	local a=$1 head tail out="" i n
	case $a in
	*::*)
		head=${a%%::*} tail=${a#*::}
		local IFS=:
		# shellcheck disable=SC2086
		set -- $head
		local hd=("$@")
		# shellcheck disable=SC2086
		set -- $tail
		local tl=("$@")
		n=$((8 - ${#hd[@]} - ${#tl[@]}))
		set -- "${hd[@]}"
		for ((i = 0; i < n; i++)); do set -- "$@" 0; done
		set -- "$@" "${tl[@]}"
		;;
	*)
		local IFS=:
		# shellcheck disable=SC2086
		set -- $a
		;;
	esac
	for i in "$@"; do out="$out$(printf '%04x' "0x${i:-0}"):"; done
	echo "${out%:}"
}

gid_index() {
	local i g
	for i in $(seq 0 15); do
		g=$(cat "/sys/class/infiniband/$1/ports/1/gids/$i" 2>/dev/null) || continue
		[ "$g" = "$2" ] && { echo "$i"; return 0; }
	done
	return 1
}

show_gids() {
	local i g
	for i in $(seq 0 15); do
		g=$(cat "/sys/class/infiniband/$1/ports/1/gids/$i" 2>/dev/null) || continue
		[ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
		echo "$1 gid[$i] $g $(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$i" 2>/dev/null) $(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/$i" 2>/dev/null)"
	done
}

# cm_listening PORT: `rdma resource show cm_id` lists a LISTEN id on PORT
# (user-space and kernel listeners alike).
cm_listening() {
	rdma resource show cm_id 2>/dev/null | grep -E "state LISTEN .*src-addr [^ ]*:$1( |$)" >/dev/null
}

pid_alive() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat" 2>/dev/null; }
daemon_alive() { pid_alive "${PID:-}"; }
listening() { daemon_alive && cm_listening "$PORT"; }

# tcp_listening PORT: a TCP (v4 or v6) socket in LISTEN state on PORT.
tcp_listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6
}

# ------------------------------------------------------------------ SRP initiator
# srp_login OPTS: load ib_srp (module parameters from the srp_params argument,
# comma separated, e.g. srp_params=never_register=1,ch_count=1) and write OPTS
# to add_target.
srp_login() {
	local params
	params=$(arg srp_params "")
	modprobe sd_mod && modprobe sg || return 1
	if [ ! -d /sys/module/ib_srp ]; then
		# shellcheck disable=SC2086 # one word per parameter
		run modprobe ib_srp ${params//,/ } || return 1
	fi
	local f=/sys/class/infiniband_srp/srp-$RXE-1/add_target
	[ -e "$f" ] || { echo "no $f"; return 1; }
	# A target port deleted by srp_logout stays on ib_srp's list until its removal
	# work has also disconnected and freed the channels, which ends after the
	# disks are gone: add_target for the same target meanwhile fails with EEXIST
	# ("Already connected"). Retry that for up to 10 s; any other error at once.
	local i out
	echo "SRPTVM\$ sh -c echo '$1' > $f"
	for i in $(seq 0 49); do
		if out=$(sh -c "echo '$1' > $f" 2>&1); then
			[ "$i" -eq 0 ] || echo "SRPTVM: add_target: EEXIST $i time(s) while the previous target port was being removed"
			return 0
		fi
		case $out in
		*"File exists"*) sleep 0.2 ;;
		*)
			echo "$out" >&2
			return 1
			;;
		esac
	done
	echo "$out" >&2
	return 1
}

# inq_id DEV: "VENDOR/PRODUCT" from the standard INQUIRY data (sg_inq), trimmed.
inq_id() {
	sg_inq "$1" | awk -F': *' '
		/Vendor identification/ { v = $2 } /Product identification/ { p = $2 }
		END { sub(/ +$/, "", v); sub(/ +$/, "", p); print v "/" p }'
}

# disk_host sdX: the SCSI host (hostN) of a disk.
disk_host() {
	local h
	h=$(readlink -f "/sys/block/$1/device")
	h=${h%/target*}
	echo "${h##*/}"
}

# disk_lun sdX: the LUN of a SCSI disk (the L of H:C:T:L).
disk_lun() {
	local a
	a=$(basename "$(readlink -f "/sys/block/$1/device")")
	echo "${a##*:}"
}

# srp_disk_for_lun L: the ib_srp disk (sdX) with LUN L, or nothing and status 1.
srp_disk_for_lun() {
	local d
	for d in $(srp_disks); do
		[ "$(disk_lun "$d")" = "$1" ] && { echo "$d"; return 0; }
	done
	return 1
}

# srp_disk_of ID_EXT: the ib_srp disk (sdX) of the SRP target port with that id_ext (16 hex
# digits), or nothing and status 1: which of two target ports a disk came through.
srp_disk_of() {
	local d h
	for d in $(srp_disks); do
		h=$(disk_host "$d")
		[ "$(cat "/sys/class/scsi_host/$h/id_ext" 2>/dev/null)" = "0x$1" ] && { echo "$d"; return 0; }
	done
	return 1
}

# disk_ios sdX|dm-N: completed reads + writes (fields 1 and 5 of /sys/block/DEV/stat).
disk_ios() { awk '{ print $1 + $5 }' "/sys/block/$1/stat"; }

# mpath_setup OUT DISK...: dm-multipath over the DISKs, grouped by ALUA priority
# (/lab/multipath.conf, which the Go checks use too), without udev or multipathd (the VM has
# neither): libdevmapper makes the /dev/mapper nodes itself (DM_DISABLE_UDEV), and multipath
# reads the WWID from sysfs (VPD page 0x83) when uid_attribute is empty. The hardware handler is the one the kernel attached
# (retain_attached_hw_handler, the default). Writes `multipath -ll` to OUT and sets MPNAME
# (the first map's name, empty without one) and MPDEV (/dev/mapper/MPNAME); the caller
# checks the map.
mpath_setup() {
	local out=$1 d
	shift
	mkdir -p /etc/multipath
	cp /lab/multipath.conf /etc/multipath.conf
	export DM_DISABLE_UDEV=1
	# multipath lists only block devices udev has initialized (libudev's
	# match_is_initialized): a device is when udev's database has an entry for it, which
	# udev would have written.
	mkdir -p /run/udev/data
	for d in "$@"; do
		echo "I:1" >"/run/udev/data/b$(cat "/sys/block/$d/dev")"
	done
	run multipath -v2 2>&1 | tail -20
	# (multipath warns first that multipathd is not running)
	run multipath -ll 2>&1 | tee "$out"
	MPNAME=$(awk '/ dm-[0-9]+ / { print $1; exit }' "$out")
	# shellcheck disable=SC2034 # for the caller
	MPDEV=/dev/mapper/$MPNAME
}

srp_disks() {
	local d
	for d in /sys/block/sd*; do
		[ -e "$d" ] || continue
		[ "$(cat "/sys/class/scsi_host/$(disk_host "${d##*/}")/proc_name" 2>/dev/null)" = ib_srp ] && echo "${d##*/}"
	done
}

srp_logout() {
	local p disks
	disks=$(srp_disks)
	for p in /sys/class/srp_remote_ports/*; do
		[ -e "$p/delete" ] && run sh -c "echo 1 > $p/delete"
	done
	wait_for 30 no_srp_disks || { echo "SRP disks still present: $(srp_disks)"; return 1; }
	# The disks go before ib_srp has finished removing the target port (srp_remove_target:
	# the SCSI host first, then the RDMA channels): a daemon stopped before that disconnects
	# channels ib_srp still owns, and its reconnect timer can bring the port back.
	wait_for 30 no_srp_rports || { echo "SRP remote ports still present: $(ls /sys/class/srp_remote_ports)"; return 1; }
	[ -n "$disks" ] && echo "removed: $disks"
	return 0
}

no_srp_disks() { [ -z "$(srp_disks)" ]; }
no_srp_rports() { [ -z "$(ls /sys/class/srp_remote_ports 2>/dev/null)" ]; }

# dmesg_mark: the number of lines in the kernel log now; dmesg_since MARK: the
# lines logged after it.
dmesg_mark() { dmesg | wc -l; }
dmesg_since() { dmesg | tail -n +$(($1 + 1)); }

# srp_transport_errors MARK: ib_srp's transport error, reconnect and SCSI error
# handling lines (and rxe's) logged after MARK. An SRP session that worked
# has none; ib_srp hides a reconnect from the SCSI layer, so a data check
# alone would not notice one.
srp_transport_errors() {
	dmesg_since "$1" | grep -E 'ib_srp: (failed |reconnect|.*SRP abort|.*SRP reset)|rdma_rxe: .*(not free|failed|error)|rejected|REJ received' || true
}

# srp_errors_summary LINES: one-line summary of srp_transport_errors' output.
# rdma_rxe's "rxe_reg_fast_mr: mr->lkey = ... not free" is a soft-RoCE race in
# the initiator's memory registration (FRWR) that ends in an ib_srp reconnect;
# see README.md (srp_params=never_register=1 avoids FRWR).
srp_errors_summary() {
	local n first
	n=$(grep -c . <<<"$1")
	first=$(head -1 <<<"$1" | sed 's/^\[[^]]*\] //')
	if grep -q 'rxe_reg_fast_mr.*not free' <<<"$1"; then
		echo "$n error line(s), starting with the soft-RoCE FRWR race (see README): $first"
	else
		echo "$n error line(s): $first"
	fi
}

kernel_log_problems() {
	dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|general protection|hung_task|blocked for more than|UBSAN|KASAN|list_del corruption' || true
}

# record_kernel_log: the "kernel log" check at the end of a test: the lines of
# kernel_log_problems printed and the first one recorded as the failure.
record_kernel_log() {
	local problems
	problems=$(kernel_log_problems)
	if [ -z "$problems" ]; then
		record "kernel log" pass "no warnings, oopses or hung tasks"
	else
		echo "$problems"
		record "kernel log" fail "$(echo "$problems" | head -1)"
	fi
}
