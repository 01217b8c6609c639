# shellcheck shell=bash
# ceph-lib.sh - a throw-away Ceph cluster inside the test VM, for guest/rbd-e2e.sh and gateways.sh:
# one monitor, one OSD on memstore, no manager, no cephx, bound to 127.0.0.1. Sourced after
# lib.sh; rbdctl (integration/ceph/rbdctl) stands in for the ceph and rbd tools.
#
#   ceph_conf [EXTRA]           write $C/ceph.conf (EXTRA: more [global] lines) and export CEPH_CONF
#   ceph_up POOL IMAGE BYTES    mon, OSD, the pool and the image
#   ceph_start IMAGE MIB [EXTRA]  ceph_conf EXTRA, ceph_up rbd IMAGE, the "ceph cluster" check
#                               (fail, which ends the test, when the cluster does not come up)
#   ceph_stop                   SIGTERM the OSD and the monitor (SIGKILL after 20 s)

# shellcheck source=../../ceph/conf.sh
. /lab/ceph-conf.sh

RBDCTL=${RBDCTL:-/usr/local/bin/rbdctl}
C=${C:-/run/ceph}

ceph_pid() { cat "$C/run/ceph-$1.pid" 2>/dev/null; }

# shellcheck disable=SC2120 # EXTRA is optional
ceph_conf() {
	mkdir -p "$C"/{run,log,mon/ceph-a,osd/ceph-0}
	FSID=$(cat /proc/sys/kernel/random/uuid)
	# pg num 8: ceph_up's pool; no erasure-code plugins in the image
	ceph_conf_write "$C" "$FSID" 127.0.0.1 1073741824 "osd pool default pg num = 8
osd pool default pgp num = 8
osd erasure code plugins =
${1:-}"
	MON=$CEPH_MON
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

ceph_start() {
	local t0
	t0=$(uptime_s)
	ceph_conf "${3:-}"
	if ceph_up rbd "$1" $(($2 << 20)); then
		record "ceph cluster" pass "mon + OSD up, pool rbd and image rbd/$1 ($2 MiB) made in $(since "$t0") s${3:+; $3}"
	else
		tail -n 30 "$C"/log/*.log
		fail "the cluster did not come up"
	fi
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
