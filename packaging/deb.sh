#!/bin/bash
# make deb: a Debian binary package of `make install DESTDIR=<tree> PREFIX=/usr`, built with
# dpkg-deb: the binary (stripped), the systemd unit in /usr/lib/systemd/system, the sysusers.d
# file in /usr/lib/sysusers.d, the man pages (gzipped), completions, the example configuration
# (a conffile) and the documentation in /usr/share/doc/srptarget. RBD=1 builds srptarget-rbd,
# the same with the rbd backstore, which links librbd and librados (and so needs Ceph's
# libraries); RBD=0 (the default here) builds srptarget, which needs rdma-core's only.
# Writes bin/<package>_<version>_<arch>.deb.
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
RBD=${RBD:-0}
[ "$RBD" = 1 ] || RBD=0
pkg=srptarget depends="libc6, libibverbs1, librdmacm1"
if [ "$RBD" = 1 ]; then
	pkg=srptarget-rbd depends="$depends, librbd1, librados2"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
$MAKE --no-print-directory install DESTDIR="$root" PREFIX=/usr SYSUSERSDIR=/usr/lib/sysusers.d RBD="$RBD" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; exit 1; }
strip --strip-unneeded "$root/usr/bin/srptarget"
# Debian policy 12.1: man pages compressed with gzip -9n.
find "$root/usr/share/man" -type f -exec gzip -9n {} +
doc=$root/usr/share/doc/$pkg
install -d "$doc"
install -m 0644 README.md "$doc/README.md"
install -m 0644 configs/README.md "$doc/configs-README.md"
install -m 0644 docs/metrics.md "$doc/metrics.md"
gzip -9n <CHANGELOG.md >"$doc/changelog.gz"
chmod 0644 "$doc/changelog.gz"
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: srptarget
Source: the srptarget repository (README.md)
COPYRIGHT

release=$(sed -n 's/^const release = "\(.*\)"$/\1/p' cmd/srptarget/version.go)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || true)
version=$release${commit:++git.$commit}
arch=$(dpkg --print-architecture)
size=$(du -sk "$root" | cut -f1)
install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<CONTROL
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: srptarget developers <srptarget@localhost>
Installed-Size: $size
Depends: $depends
Recommends: rdma-core
Section: net
Priority: optional
Homepage: https://github.com/srptarget/srptarget
Description: user-space SCSI RDMA Protocol (SRP) target
 srptarget serves LUNs in files, block devices, memory$([ "$RBD" = 1 ] && echo " or Ceph RBD images") to the
 Linux ib_srp initiator over RDMA (RoCE, iWARP, InfiniBand), described in one YAML file
 (srptarget.yaml(5)). It runs as an unprivileged systemd service with a control socket
 (srptarget status, sessions, luns, stats, reload) and Prometheus metrics.
CONTROL
if [ "$RBD" = 1 ]; then
	printf 'Provides: srptarget\nConflicts: srptarget\nReplaces: srptarget\n' >>"$root/DEBIAN/control"
else
	printf 'Conflicts: srptarget-rbd\nReplaces: srptarget-rbd\n' >>"$root/DEBIAN/control"
fi
echo /etc/srptarget/srptarget.yaml.example >"$root/DEBIAN/conffiles"
# The user comes from the sysusers.d file; the unit is not enabled: there is no
# /etc/srptarget/srptarget.yaml until the administrator writes one.
cat >"$root/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	systemd-sysusers srptarget.conf || true
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
		if systemctl is-active --quiet srptarget; then systemctl try-restart srptarget || true; fi
	fi
fi
SCRIPT
cat >"$root/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop srptarget || true
fi
SCRIPT
cat >"$root/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
SCRIPT
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
out=bin/${pkg}_${version}_${arch}.deb
dpkg-deb --root-owner-group --build "$root" "$out" >/dev/null
echo "built $out ($(du -k "$out" | cut -f1) KiB): $(dpkg-deb -f "$out" Package Version Depends | tr '\n' ' ')"
