# shellcheck shell=bash
# ceph-lib.sh - a throw-away Ceph cluster inside the test VM, for guest/rbd-e2e.sh and gateways.sh:
# one monitor, one OSD on memstore, no manager, no cephx, bound to 127.0.0.1. Sourced after
# lib.sh; rbdctl (integration/ceph/rbdctl) stands in for the ceph and rbd tools.
#
#   ceph_conf [EXTRA]           write $C/ceph.conf (EXTRA: more [global] lines) and export CEPH_CONF
#   ceph_up POOL IMAGE BYTES    mon, OSD, the pool and the image
#   ceph_stop                   SIGTERM the OSD and the monitor (SIGKILL after 20 s)

RBDCTL=${RBDCTL:-/usr/local/bin/rbdctl}
C=${C:-/run/ceph}

ceph_pid() { cat "$C/run/ceph-$1.pid" 2>/dev/null; }

# shellcheck disable=SC2120 # EXTRA is optional
ceph_conf() {
	mkdir -p "$C"/{run,log,mon/ceph-a,osd/ceph-0}
	FSID=$(cat /proc/sys/kernel/random/uuid)
	MON="[v2:127.0.0.1:3300,v1:127.0.0.1:6789]"
	cat >"$C/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = $MON
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = $C/run
pid file = $C/run/\$cluster-\$name.pid
admin socket = $C/run/\$cluster-\$name.asok
log file = $C/log/\$cluster-\$name.log
mon data = $C/mon/\$cluster-\$id
osd data = $C/osd/\$cluster-\$id
osd objectstore = memstore
memstore device bytes = 1073741824
memstore page set = true
memstore page size = 4096
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd erasure code plugins =
mon allow pool size one = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 2
mon data avail crit = 1
paxos propose interval = 0.1
paxos min wait = 0.01
${1:-}
[client]
admin socket = $C/run/\$cluster-\$name.\$pid.\$cctid.asok
log file = $C/log/\$cluster-\$name.\$pid.log
rbd cache = false
CONF
	export CEPH_CONF=$C/ceph.conf
}

ceph_up() {
	run monmaptool --create --fsid "$FSID" --addv a "$MON" "$C/monmap" >/dev/null &&
		run ceph-mon --mkfs -i a --monmap "$C/monmap" &&
		run ceph-mon -i a || return 1
	local uuid id
	uuid=$(cat /proc/sys/kernel/random/uuid)
	id=$(timeout 120 "$RBDCTL" mon "{\"prefix\": \"osd new\", \"uuid\": \"$uuid\"}") || return 1
	echo "osd id $id"
	run ceph-osd -i "$id" --mkfs --osd-uuid "$uuid" &&
		run ceph-osd -i "$id" &&
		run timeout 300 "$RBDCTL" pool-create "$1" &&
		run timeout 300 "$RBDCTL" create "$1" "$2" "$3"
}

ceph_stop() {
	local n p
	for n in osd.0 mon.a; do
		p=$(ceph_pid "$n")
		[ -n "$p" ] || continue
		kill -TERM "$p" 2>/dev/null
		wait_for 20 eval "[ ! -d /proc/$p ] || grep -q '^[0-9]* ([^)]*) Z' /proc/$p/stat" || kill -KILL "$p" 2>/dev/null
	done
}
