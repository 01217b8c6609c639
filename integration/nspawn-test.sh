#!/bin/bash
# The installed unit under a booted systemd: a Debian 12 minbase tree (debootstrap, cached),
# `make install DESTDIR=<tree>` into it (or, with DEB=FILE, that package installed with dpkg),
# the configuration of an operator, then `systemd-nspawn -b`. A oneshot probe unit ordered
# after srptarget.service checks, from inside, what an operator would: the unit is active and
# says in STATUS= that it waits for an RDMA device (the container has none), `srptarget
# status` answers a member of the socket's group (and refuses others), a configuration with
# an error makes `systemctl reload` fail and its reason reaches `journalctl -p err`, a good
# one reloads, the journal is text with priorities, and `systemctl stop` is clean; then the
# same without a target identity in the configuration (it waits for a device to take the node
# GUID from: active, STATUS=, status, luns and reload answer, a clean stop). The probe powers
# the container off; its lines come back here.
#
# Needs root, debootstrap and systemd-nspawn (systemd-container); .ci/run installs them. The
# tree is built once per package list (about a minute) in $SRPT_NSPAWN_CACHE (default
# /var/cache/srptarget-ci), in a directory named after the list, and copied for each run.
# `make nspawn-test` runs it.
set -u
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
CACHE=${SRPT_NSPAWN_CACHE:-/var/cache/srptarget-ci}
MIRROR=${SRPT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# systemd as PID 1 and the daemon's run-time libraries (what the .deb depends on).
PACKAGES=systemd,systemd-sysv,dbus,libibverbs1,librdmacm1
die() { echo "nspawn-test: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, systemd-nspawn)"
for t in debootstrap systemd-nspawn; do
	command -v $t >/dev/null || die "$t not found (apt-get install debootstrap systemd-container)"
done

# The cached tree: one directory per suite, variant and package list.
key=$(printf '%s %s %s\n' "$SUITE" minbase "$PACKAGES" | sha256sum | cut -c1-12)
base=$CACHE/$SUITE-minbase-$key
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ ! -e "$base/etc/os-release" ]; then
	echo "nspawn-test: debootstrap $SUITE ($PACKAGES) into $base"
	rm -rf "$base.tmp"
	start=$(date +%s)
	debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$base.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
		{ tail -20 "$CACHE/debootstrap.log"; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
	rm -rf "$base.tmp"/var/cache/apt/archives/*.deb
	mv "$base.tmp" "$base"
	echo "nspawn-test: the tree took $(($(date +%s) - start)) s"
else
	echo "nspawn-test: cached tree $base"
fi
flock -u 9

work=$(mktemp -d /var/tmp/srpt-nspawn.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
cp -a "$base" "$root"

if [ -n "${DEB:-}" ]; then
	cp "$DEB" "$root/tmp/srptarget.deb"
	chroot "$root" dpkg -i /tmp/srptarget.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; die "dpkg -i $DEB failed"; }
	bindir=/usr/bin unitdir=/usr/lib/systemd/system
	# The package enables nothing (there is no configuration yet): the operator does.
	ln -s "$unitdir/srptarget.service" "$root/etc/systemd/system/multi-user.target.wants/srptarget.service"
	echo "nspawn-test: dpkg -i $(basename "$DEB"): $(chroot "$root" dpkg-query -W -f='${Package} ${Version} ${Status}' srptarget srptarget-rbd 2>/dev/null)"
else
	# RBD=0: the tree has no Ceph libraries; what links librbd is the .deb's business.
	$MAKE --no-print-directory install DESTDIR="$root" RBD=0 >"$work/install.log" 2>&1 ||
		{ cat "$work/install.log"; die "make install DESTDIR=$root failed"; }
	bindir=/usr/local/bin unitdir=/usr/local/lib/systemd/system
	ln -s "$unitdir/srptarget.service" "$root/etc/systemd/system/multi-user.target.wants/srptarget.service"
	echo "nspawn-test: make install DESTDIR=<tree>"
fi

# The operator's part: a configuration (a file LUN in the state directory, made by the daemon)
# and a user in the socket's group.
cat >"$root/etc/srptarget/srptarget.yaml" <<'YAML'
target: {id_ext: "0x0002c90300a0b0c1", ioc_guid: "0x0002c90300a0b0c1"}
listeners: [{address: "0.0.0.0", port: 5555}]
luns:
  - {lun: 0, backstore: memory, size: 16MiB}
  - {lun: 1, backstore: file, path: /var/lib/srptarget/lun1.img, size: 8MiB, create: true}
acls: [{initiators: ["*"], luns: [0, 1]}]
YAML
chmod 0644 "$root/etc/srptarget/srptarget.yaml"
sed 's/backstore: memory/backstore: memroy/' "$root/etc/srptarget/srptarget.yaml" >"$root/etc/srptarget/broken.yaml"

mkdir -p "$root/usr/local/lib/srptarget-probe"
cat >"$root/usr/local/lib/srptarget-probe/probe.sh" <<PROBE
#!/bin/bash
# Runs inside the container, after srptarget.service.
PATH=$bindir:\$PATH
LOG=/var/log/srptarget-probe.log
ok() { echo "ok: \$*" | tee -a \$LOG; }
bad() { echo "FAIL: \$*" | tee -a \$LOG; }
check() { # check WHAT COMMAND...: ok when the command succeeds
	local what=\$1; shift
	if out=\$("\$@" 2>&1); then ok "\$what"; else bad "\$what: \$out"; fi
}
: >\$LOG
check "useradd srpt-op, a member of group srptarget" useradd --no-create-home --groups srptarget srpt-op
check "useradd srpt-other" useradd --no-create-home srpt-other

state=\$(systemctl is-active srptarget)
[ "\$state" = active ] && ok "systemctl is-active srptarget: active" || bad "srptarget is \$state: \$(systemctl status srptarget --no-pager 2>&1 | tail -20)"
status=\$(systemctl show -p StatusText --value srptarget)
[ "\$status" = "waiting for an RDMA device with the address of 0.0.0.0:5555" ] && ok "STATUS=\$status" || bad "STATUS=\$status"
[ "\$(stat -c '%U:%G %a' /run/srptarget)" = "srptarget:srptarget 750" ] && ok "RuntimeDirectory /run/srptarget: srptarget:srptarget 0750" ||
	bad "/run/srptarget: \$(stat -c '%U:%G %a' /run/srptarget 2>&1)"

out=\$(runuser -u srpt-op -- srptarget status 2>&1); rc=\$?
if [ \$rc = 4 ] && grep -q 'state: waiting for an RDMA device' <<<"\$out"; then ok "srptarget status as a member of group srptarget: exit 4 (not serving), \$(grep state: <<<"\$out")"; else bad "srptarget status as srpt-op: rc \$rc: \$out"; fi
grep -q '0.0.0.0:5555: waiting for an RDMA device with this address' <<<"\$out" && ok "status names the listener that waits" || bad "status: \$out"
out=\$(runuser -u srpt-op -- srptarget luns 2>&1) && grep -q '^LUN 1: file' <<<"\$out" && ok "srptarget luns answers while waiting: \$(grep -m1 '^LUN 1' <<<"\$out")" || bad "luns: \$out"
[ -f /var/lib/srptarget/lun1.img ] && ok "the file LUN was made in the state directory before READY=1" || bad "no /var/lib/srptarget/lun1.img"
out=\$(runuser -u srpt-op -- srptarget sessions 2>&1) && ok "srptarget sessions answers while waiting: \$out" || bad "sessions: \$out"
out=\$(runuser -u srpt-other -- srptarget status 2>&1) && bad "srptarget status answered a user outside the group: \$out" ||
	{ grep -q 'connect: permission denied' <<<"\$out" && ok "srptarget status refused to a user outside the group" || bad "srpt-other: \$out"; }

out=\$(runuser -u srpt-op -- srptarget status 2>&1)
grep -q '^backstore I/O: io_uring\$' <<<"\$out" && ok "status: backstore I/O: io_uring (the unit's seccomp filter lets the daemon's probe set up a ring, register a buffer and read through it)" ||
	bad "status does not say io_uring: \$(grep 'backstore I/O' <<<"\$out")"
journalctl -u srptarget -o cat --no-pager | grep -q '^backstore I/O.*"engine": "io_uring"' && ok "the journal's start-up line: \$(journalctl -u srptarget -o cat --no-pager | grep -m1 '^backstore I/O')" ||
	bad "no backstore I/O line with io_uring: \$(journalctl -u srptarget -o cat --no-pager | grep 'backstore I/O')"
errs=\$(journalctl -u srptarget -p err -o cat --no-pager)
[ -z "\$errs" ] && ok "no error in the journal after the start" || bad "errors at start: \$errs"
warn=\$(journalctl -u srptarget -p warning -o cat --no-pager)
grep -q 'no RDMA device has the address of this listener yet' <<<"\$warn" && ok "journalctl -p warning: \$(grep -m1 'no RDMA device has the address' <<<"\$warn" | cut -c1-60)..." || bad "no waiting warning at -p warning: \$warn"
json=\$(journalctl -u srptarget -o cat --no-pager _COMM=srptarget | grep -c '^{')
[ "\$json" = 0 ] && ok "the journal has text, not JSON" || bad "\$json JSON lines in the journal"

cp /etc/srptarget/srptarget.yaml /etc/srptarget/good.yaml
cp /etc/srptarget/broken.yaml /etc/srptarget/srptarget.yaml
if out=\$(systemctl reload srptarget 2>&1); then bad "systemctl reload succeeded with a broken configuration"; else ok "systemctl reload fails for a refused configuration: \$out"; fi
[ "\$(systemctl is-active srptarget)" = active ] && ok "still active after the refused reload" || bad "not active after a refused reload"
errs=\$(journalctl -u srptarget -p err -o cat --no-pager)
grep -q 'memroy' <<<"\$errs" && ok "journalctl -p err has the reason: \$(grep -m1 memroy <<<"\$errs")" || bad "journalctl -p err: \$errs"
grep -q '^reload refused: 1 error' <<<"\$errs" && ok "journalctl -p err has ExecReload's answer: \$(grep -m1 '^reload refused' <<<"\$errs")" || bad "no 'reload refused' at -p err: \$errs"
cp /etc/srptarget/good.yaml /etc/srptarget/srptarget.yaml
check "systemctl reload succeeds for a good configuration" systemctl reload srptarget
journalctl -u srptarget -o cat --no-pager | grep -q '^configuration reloaded' && ok "the journal says the configuration was reloaded" || bad "no 'configuration reloaded' line"

check "systemctl stop srptarget" systemctl stop srptarget
res=\$(systemctl show -p Result --value srptarget) code=\$(systemctl show -p ExecMainStatus --value srptarget)
[ "\$res/\$code" = success/0 ] && ok "clean stop: Result=\$res, exit status \$code" || bad "stop: Result=\$res ExecMainStatus=\$code"
journalctl -u srptarget -o cat --no-pager | grep -q '^every backstore flushed and closed' && ok "the journal says every backstore was flushed and closed" || bad "no flush line"
[ ! -e /run/srptarget ] && ok "/run/srptarget removed at stop" || bad "/run/srptarget left: \$(ls -la /run/srptarget)"

# The drop-in configs/srptarget.service gives to forbid io_uring: auto falls back and says why,
# io_uring refuses to start and names the key.
mkdir -p /etc/systemd/system/srptarget.service.d
printf '[Service]\\nSystemCallFilter=~io_uring_setup io_uring_enter io_uring_register\\n' >/etc/systemd/system/srptarget.service.d/no-io_uring.conf
systemctl daemon-reload
check "systemctl start srptarget (io_uring forbidden by a drop-in)" systemctl start srptarget
out=\$(runuser -u srpt-op -- srptarget status 2>&1)
grep -q '^backstore I/O: sync (io_uring does not work here: .*operation not permitted' <<<"\$out" && ok "io_uring forbidden: status: \$(grep 'backstore I/O' <<<"\$out")" || bad "io_uring forbidden: status: \$out"
journalctl -u srptarget -p warning -o cat --no-pager | grep -q '^backstore I/O: blocking calls on worker goroutines' && ok "io_uring forbidden: the journal warns at -p warning" || bad "io_uring forbidden: no warning"
check "systemctl stop srptarget (io_uring forbidden)" systemctl stop srptarget
echo 'limits: {backstore_io: io_uring}' >>/etc/srptarget/srptarget.yaml
systemctl start srptarget 2>/dev/null
sleep 1
[ "\$(systemctl is-active srptarget)" != active ] && ok "io_uring forbidden, limits.backstore_io io_uring: the unit does not start" || bad "io_uring forbidden, backstore_io io_uring: \$(systemctl is-active srptarget)"
journalctl -u srptarget -p err -o cat --no-pager | grep -q 'limits.backstore_io: io_uring does not work here' && ok "journalctl -p err: \$(journalctl -u srptarget -p err -o cat --no-pager | grep -m1 'limits.backstore_io' | cut -c1-120)..." || bad "no limits.backstore_io error: \$(journalctl -u srptarget -p err -o cat --no-pager | tail -5)"
systemctl reset-failed srptarget
rm /etc/systemd/system/srptarget.service.d/no-io_uring.conf
systemctl daemon-reload
cp /etc/srptarget/good.yaml /etc/srptarget/srptarget.yaml

# Without target.id_ext the identity is the first RDMA device's node GUID: the unit is still
# active once the first stage passed, says that it waits for a device, and answers.
grep -v '^target:' /etc/srptarget/good.yaml >/etc/srptarget/srptarget.yaml
check "systemctl start srptarget (no target identity)" systemctl start srptarget
[ "\$(systemctl is-active srptarget)" = active ] && ok "active without a target identity" || bad "no identity: \$(systemctl status srptarget --no-pager 2>&1 | tail -20)"
status=\$(systemctl show -p StatusText --value srptarget)
[ "\$status" = "waiting for an RDMA device" ] && ok "no identity: STATUS=\$status" || bad "no identity: STATUS=\$status"
journalctl -u srptarget -p warning -o cat --no-pager | grep -q '^no RDMA device yet: waiting for one' && ok "journalctl -p warning: no RDMA device yet: waiting for one" || bad "no 'no RDMA device yet' warning"
out=\$(runuser -u srpt-op -- srptarget status 2>&1); rc=\$?
[ \$rc = 4 ] && grep -q 'state: waiting for an RDMA device' <<<"\$out" && ok "no identity: srptarget status exits 4, \$(grep state: <<<"\$out")" || bad "no identity: status rc \$rc: \$out"
out=\$(runuser -u srpt-op -- srptarget luns 2>&1) && grep -q '^LUN 0: memory' <<<"\$out" && ok "no identity: srptarget luns answers: \$(grep -m1 '^LUN 0' <<<"\$out")" || bad "no identity: luns: \$out"
out=\$(runuser -u srpt-op -- srptarget reload 2>&1) && ok "no identity: srptarget reload checks the file: \$(head -1 <<<"\$out")" || bad "no identity: reload: \$out"
check "systemctl stop srptarget (no target identity)" systemctl stop srptarget
res=\$(systemctl show -p Result --value srptarget) code=\$(systemctl show -p ExecMainStatus --value srptarget)
[ "\$res/\$code" = success/0 ] && ok "no identity: clean stop: Result=\$res, exit status \$code" || bad "no identity: stop: Result=\$res ExecMainStatus=\$code"
cp /etc/srptarget/good.yaml /etc/srptarget/srptarget.yaml
echo "--- journal of srptarget.service (with priorities)" >>\$LOG
journalctl -u srptarget -o short-monotonic --no-pager --output-fields=PRIORITY,MESSAGE >>\$LOG 2>&1
journalctl -u srptarget -o export --no-pager | grep -E '^(PRIORITY|MESSAGE)=' | paste - - | sed 's/^/  /' | head -40 >>\$LOG
echo "--- probe done" >>\$LOG
PROBE
chmod 0755 "$root/usr/local/lib/srptarget-probe/probe.sh"
cat >"$root/etc/systemd/system/srptarget-probe.service" <<'UNIT'
[Unit]
Description=srptarget probe (integration/nspawn-test.sh)
Wants=srptarget.service
After=srptarget.service
[Service]
Type=oneshot
ExecStart=/usr/local/lib/srptarget-probe/probe.sh
ExecStopPost=/usr/bin/systemctl --no-block poweroff
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
UNIT
ln -s /etc/systemd/system/srptarget-probe.service "$root/etc/systemd/system/multi-user.target.wants/srptarget-probe.service"
# No getty on the container's console; no host name lookups.
rm -f "$root/etc/systemd/system/getty.target.wants/"*

echo "nspawn-test: systemd-nspawn -b (the probe powers off)"
start=$(date +%s)
# --register=no and --keep-unit: no machined or scope on the host (CI has no systemd as PID 1).
# CAP_IPC_LOCK, which nspawn leaves out by default, is what the unit gives the daemon.
timeout 300 systemd-nspawn -q -D "$root" -b --register=no --keep-unit --private-network \
	--console=pipe --capability=CAP_IPC_LOCK >"$work/boot.log" 2>&1 </dev/null
rc=$?
echo "nspawn-test: the container ran $(($(date +%s) - start)) s (exit $rc)"
log=$root/var/log/srptarget-probe.log
if [ ! -s "$log" ] || ! grep -q -- '--- probe done' "$log"; then
	tail -60 "$work/boot.log"
	die "the probe did not finish (exit $rc)"
fi
cat "$log"
passed=$(grep -c '^ok:' "$log")
failed=$(grep -c '^FAIL:' "$log")
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
