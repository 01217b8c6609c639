# shellcheck shell=bash
# conf.sh - the ceph.conf of the throw-away test cluster, one template for the host's
# (integration/ceph/cluster.sh, make test-rbd) and the test VM's (guest/ceph-lib.sh, which
# the VM gets at /lab/ceph-conf.sh): one monitor, one OSD on memstore, no manager, no
# cephx, every path under one directory. Sourced; writes nothing until called.
#
#   ceph_conf_write DIR FSID ADDR MEMSTORE_BYTES [EXTRA]
#       write DIR/ceph.conf: the monitor at ADDR (msgr2 on 3300, v1 on 6789 unless
#       CEPH_MON_PORT_V2 and CEPH_MON_PORT_V1 say otherwise), the run, log, mon and osd
#       directories under DIR, a memstore of MEMSTORE_BYTES, EXTRA (more [global] lines);
#       sets CEPH_MON to the monitor's address vector (monmaptool --addv takes it)

ceph_conf_write() {
	local d=$1 fsid=$2 addr=$3 bytes=$4
	CEPH_MON="[v2:$addr:${CEPH_MON_PORT_V2:-3300},v1:$addr:${CEPH_MON_PORT_V1:-6789}]"
	cat >"$d/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = $CEPH_MON
public addr = $addr
cluster addr = $addr
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = $d/run
pid file = $d/run/\$cluster-\$name.pid
admin socket = $d/run/\$cluster-\$name.asok
log file = $d/log/\$cluster-\$name.log
mon data = $d/mon/\$cluster-\$id
osd data = $d/osd/\$cluster-\$id
osd objectstore = memstore
memstore device bytes = $bytes
memstore page set = true
memstore page size = 4096
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon warn on insecure global id reclaim allowed = false
mon data avail warn = 2
mon data avail crit = 1
paxos propose interval = 0.1
paxos min wait = 0.01
${5:-}
[client]
admin socket = $d/run/\$cluster-\$name.\$pid.\$cctid.asok
log file = $d/log/\$cluster-\$name.\$pid.log
rbd cache = false
CONF
}
