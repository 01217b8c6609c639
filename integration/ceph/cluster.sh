#!/usr/bin/env bash
# A throw-away Ceph cluster for tests: one monitor and one OSD on memstore (RAM), no manager,
# no authentication, bound to 127.0.0.1, all state in one directory.
#
#   integration/ceph/cluster.sh start DIR   # prints shell assignments (CEPH_CONF=...) to eval
#   integration/ceph/cluster.sh stop DIR    # stops what start started and removes DIR
#   integration/ceph/cluster.sh run CMD...  # start in a temporary directory, run CMD with
#                                           # CEPH_CONF, SRPT_RBD_CONF and SRPT_RBD_POOL set,
#                                           # then stop (also on failure or interrupt);
#                                           # one run at a time per host (flock on
#                                           # $CEPH_CLUSTER_LOCK, /tmp/srpt-ceph.lock)
#
# No manager: pool creation, `rbd pool init`, rbd and librbd work without one, but `ceph pg
# stat` and the PG part of `ceph -s` would hang, so readiness is judged with rbd itself. Every
# ceph/rbd call has a timeout: the tools otherwise wait forever for a cluster that is not there.
# Only the PIDs written to DIR/run/*.pid are ever signalled. Needs ceph-mon, ceph-osd and
# ceph-common (Debian: apt-get install ceph-mon ceph-osd); root is not needed.
set -euo pipefail

MON_ADDR=${CEPH_MON_ADDR:-127.0.0.1}
POOL=${SRPT_RBD_POOL:-rbd}
MEMSTORE_BYTES=${CEPH_MEMSTORE_BYTES:-2147483648}

# shellcheck source=conf.sh
. "$(dirname "${BASH_SOURCE[0]}")/conf.sh"

log() { echo "ceph-cluster: $*" >&2; }

start() {
	local d=$1
	for bin in ceph-mon ceph-osd ceph rbd monmaptool uuidgen; do
		command -v "$bin" >/dev/null || { log "$bin not found (apt-get install ceph-mon ceph-osd)"; return 1; }
	done
	mkdir -p "$d"/{run,log,mon/ceph-a,osd/ceph-0}
	d=$(cd "$d" && pwd)
	local fsid mon t0
	t0=$(date +%s.%N)
	fsid=$(uuidgen)
	ceph_conf_write "$d" "$fsid" "$MON_ADDR" "$MEMSTORE_BYTES"
	mon=$CEPH_MON
	export CEPH_CONF=$d/ceph.conf
	monmaptool --create --fsid "$fsid" --addv a "$mon" "$d/monmap" >/dev/null
	ceph-mon --mkfs -i a --monmap "$d/monmap" >"$d/log/mon-mkfs.out" 2>&1
	ceph-mon -i a >>"$d/log/mon-start.out" 2>&1 9>&-
	timeout 60 ceph -s --connect-timeout 30 >/dev/null
	local uuid id
	uuid=$(uuidgen)
	id=$(timeout 30 ceph osd new "$uuid" --connect-timeout 30)
	ceph-osd -i "$id" --mkfs --osd-uuid "$uuid" >"$d/log/osd-mkfs.out" 2>&1
	ceph-osd -i "$id" >>"$d/log/osd-start.out" 2>&1 9>&-
	timeout 30 ceph osd pool create "$POOL" 8 --connect-timeout 30 >/dev/null 2>&1
	timeout 120 rbd pool init "$POOL"
	log "up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s in $d (pool $POOL)"
	echo "CEPH_CONF=$d/ceph.conf"
	echo "SRPT_RBD_CONF=$d/ceph.conf"
	echo "SRPT_RBD_POOL=$POOL"
}

# gone reports whether PID has exited: /proc/PID/stat missing or the process a zombie (kill -0
# succeeds on a zombie until its parent, here maybe a slow-reaping init, collects it).
gone() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	st=${st##*) }
	[ "${st%% *}" = Z ]
}

stop() {
	local d=$1 f pid i
	[ -d "$d" ] || return 0
	# OSD first, then the monitor: signalled together the monitor takes seconds longer.
	for f in "$d"/run/ceph-osd.*.pid "$d"/run/ceph-mon.*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		[ -n "$pid" ] || continue
		kill -CONT "$pid" 2>/dev/null || true # a test may have stopped it with SIGSTOP
		kill -TERM "$pid" 2>/dev/null || continue
		for i in $(seq 100); do
			gone "$pid" && break
			sleep 0.1
		done
		gone "$pid" || { log "pid $pid ignored SIGTERM for 10 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
	done
	rm -rf "$d"
}

case "${1:-}" in
start) start "${2:?usage: cluster.sh start DIR}" ;;
stop) stop "${2:?usage: cluster.sh stop DIR}" ;;
run)
	shift
	# Every cluster's monitor listens on MON_ADDR's fixed ports: two at once on one host would
	# answer each other's clients (a test would stop its own OSD and write through the other
	# cluster's). One at a time, then; the daemons do not inherit the lock (9>&-).
	exec 9>"${CEPH_CLUSTER_LOCK:-/tmp/srpt-ceph.lock}"
	flock 9
	dir=$(mktemp -d /tmp/srpt-ceph.XXXXXX)
	trap 'stop "$dir"' EXIT
	trap 'exit 130' INT TERM
	vars=$(start "$dir") || { log "start failed; logs:"; tail -n 20 "$dir"/log/* >&2 || true; exit 1; }
	eval "export $(echo $vars)"
	"$@"
	;;
*)
	echo "usage: $0 start DIR | stop DIR | run CMD..." >&2
	exit 2
	;;
esac
