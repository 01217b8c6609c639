#!/usr/bin/env bash
# build-image.sh - build the srptarget test VM image: a Debian bookworm kernel
# and an initramfs with soft-RoCE (rdma_rxe), the Linux SRP initiator (ib_srp),
# the LIO SRP target (ib_srpt, as a reference) and the user-space tools the
# guest tests use. Nothing is installed on the host except the tools this
# script itself needs; guest packages are fetched with `apt-get download` and
# unpacked with `dpkg-deb -x`.
#
#   integration/vm/build-image.sh        # output in $SRPT_VM_DIR/image
#
# Needs: Debian 12 (bookworm) x86-64 host, root, access to the Debian archive.
#
# Environment:
#   SRPT_VM_DIR         work directory (default /tmp/srptarget-vm)
#   SRPT_VM_REBUILD=1   rebuild even if the cache key is unchanged
#   SRPT_VM_APT_UPDATE=1  run `apt-get update` first, to pick up new package
#                       versions (otherwise it runs only when needed: host tools
#                       missing, no package lists, or a download failing)
#   SRPT_VM_CEPH=1      add ceph-mon, ceph-osd and monmaptool (the RBD e2e run)
#   SRPT_VM_KEEP_STAGE=1  keep $SRPT_VM_DIR/stage (all packages unpacked) after
#                       the build, for debugging
#
# Output ($SRPT_VM_DIR/image): vmlinuz, initramfs.cpio.gz, manifest.txt (kernel,
# package versions, modules, sizes, timings), key (the cache key). The image is
# rebuilt only when the key changes: a SHA-256 over the resolved package list
# (file names and archive hashes of every .deb) and the files that go into the
# image (this script, guest/init). Guest test scripts and guest/lib.sh are not
# in the image: run-vm.sh appends them per run as a second cpio archive.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init build-image
DEBS=$VMDIR/debs
STAGE=$VMDIR/stage
ROOT=$VMDIR/root
OUT=$VMDIR/image
ARCHDIR=x86_64-linux-gnu

[ "$(uname -m)" = x86_64 ] || die "x86-64 host required"
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
	die "a Debian host (apt-get, dpkg-deb) is required"
fi
mkdir -p "$VMDIR" "$DEBS" "$OUT"

# One build at a time per $SRPT_VM_DIR (two `make e2e` in parallel would
# otherwise unpack into the same stage directory).
exec 9>"$VMDIR/.build.lock"
flock 9

# ------------------------------------------------------------------ apt
export DEBIAN_FRONTEND=noninteractive
APT_UPDATED=
apt_update() {
	[ -n "$APT_UPDATED" ] && return 0
	log "apt-get update"
	apt-get update -qq || die "apt-get update failed"
	APT_UPDATED=1
}
[ -n "${SRPT_VM_APT_UPDATE:-}" ] && apt_update

# ------------------------------------------------------------------ host tools
# command -> Debian package that provides it
declare -A HOST_TOOLS=(
	[qemu-system-x86_64]=qemu-system-x86
	[cpio]=cpio
	[depmod]=kmod
	[modprobe]=kmod
	[readelf]=binutils
	[flock]=util-linux
	[gzip]=gzip
	[sha256sum]=coreutils
	[timeout]=coreutils
)
host_pkgs=()
for c in "${!HOST_TOOLS[@]}"; do
	command -v "$c" >/dev/null || host_pkgs+=("${HOST_TOOLS[$c]}")
done
if [ ${#host_pkgs[@]} -gt 0 ]; then
	mapfile -t host_pkgs < <(printf '%s\n' "${host_pkgs[@]}" | sort -u)
	apt_update
	log "apt-get install (host) ${host_pkgs[*]}"
	apt-get install -y -qq --no-install-recommends "${host_pkgs[@]}" >/dev/null ||
		die "apt-get install ${host_pkgs[*]} failed"
fi

# ------------------------------------------------------------------ packages
# Guest user space: these packages plus their Depends closure. Only the
# executables listed further down and the shared libraries they need (ELF
# DT_NEEDED) end up in the initramfs, so the closure may be generous; packages
# that only carry scripts or packaging machinery are left out of it.
GUEST_PKGS=(
	busybox-static bash
	libibverbs1 librdmacm1 ibverbs-providers ibverbs-utils rdmacm-utils perftest
	libnl-3-200 libnl-route-3-200
	iproute2 kmod
	sg3-utils fio
	libiscsi-bin
	e2fsprogs util-linux coreutils
	multipath-tools
)
# SRPT_VM_CEPH=1 (e2e-rbd.sh, with an SRPT_VM_DIR of its own): a Ceph monitor and OSD too, for
# a cluster inside the guest. librbd and librados are in the image either way (fio links them).
if [ "${SRPT_VM_CEPH:-0}" = 1 ]; then
	GUEST_PKGS+=(ceph-mon ceph-osd)
fi
# Never needed from the dependency closure (the explicit list above still wins).
EXCLUDE='^(python3.*|libpython3.*|perl|perl-.*|libperl.*|lib.*-perl|debconf|cdebconf|debconf-.*|adduser|dpkg|install-info|init-system-helpers|mailcap|media-types|mime-support|passwd|tar|usr-is-merged|usrmerge|readline-common|pci\.ids|libdebian-installer.*|libnewt.*|libslang.*|libtextwrap.*|dmsetup|udev|systemd|systemd-.*|lsb-base|sensible-utils|debianutils|base-files|tzdata|ucf|logrotate|cron|sysvinit-utils|init|login|mount|libpam-.*|libc-bin)$'

resolve_kernel() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}'
}
KPKG=$(resolve_kernel)
if [ -z "$KPKG" ]; then
	apt_update
	KPKG=$(resolve_kernel)
fi
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 with apt-cache"
KVER=${KPKG#linux-image-}

# resolve_debs: "file.deb SHA256:..." lines for the kernel and the guest closure,
# sorted; the file names carry the versions apt would download now.
resolve_debs() {
	local closure
	closure=$(apt-cache depends --recurse --no-recommends --no-suggests \
		--no-conflicts --no-breaks --no-replaces --no-enhances "${GUEST_PKGS[@]}" |
		grep -E '^[a-z0-9]' | sort -u | grep -vE "$EXCLUDE") || return 1
	# shellcheck disable=SC2086 # $closure is a list of package names
	apt-get download --print-uris "$KPKG" "${GUEST_PKGS[@]}" $closure |
		awk '{print $2, $4}' | sort -u
}
DEBLIST=$(resolve_debs) || { apt_update; DEBLIST=$(resolve_debs); } ||
	die "cannot resolve the guest package list"
[ -n "$DEBLIST" ] || die "empty guest package list"

# ------------------------------------------------------------------ cache
# image_key: the cache key of the resolved package list and the files that go into the image.
image_key() {
	{
		echo "format 1"
		echo "kernel $KPKG"
		echo "$DEBLIST"
		sha256sum "$HERE/build-image.sh" "$HERE/guest/init" | awk '{print $1}'
	} | sha256sum | awk '{print $1}'
}
KEY=$(image_key)
if [ -z "${SRPT_VM_REBUILD:-}" ] && [ -f "$OUT/key" ] && [ "$(cat "$OUT/key")" = "$KEY" ] &&
	[ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.cpio.gz" ]; then
	log "image up to date (key ${KEY:0:12}): $OUT"
	exit 0
fi
log "building image, kernel $KPKG, key ${KEY:0:12}"

# ------------------------------------------------------------------ download
missing_debs() {
	local f _
	while read -r f _; do
		[ -s "$DEBS/$f" ] || echo "${f%%_*}"
	done <<<"$DEBLIST"
}
mapfile -t missing < <(missing_debs)
if [ ${#missing[@]} -gt 0 ]; then
	log "apt-get download: ${#missing[@]} packages"
	if ! (cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >"$VMDIR/download.log" 2>&1); then
		# Stale package lists point at files the archive no longer has.
		[ -n "$APT_UPDATED" ] && { cat "$VMDIR/download.log" >&2; die "apt-get download failed"; }
		apt_update
		DEBLIST=$(resolve_debs) || die "cannot resolve the guest package list"
		mapfile -t missing < <(missing_debs)
		(cd "$DEBS" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >"$VMDIR/download.log" 2>&1) ||
			{ cat "$VMDIR/download.log" >&2; die "apt-get download failed"; }
		log "package list changed after apt-get update; the image key is recomputed"
		KEY=$(image_key)
	fi
fi
mapfile -t still < <(missing_debs)
[ ${#still[@]} -eq 0 ] || die "packages not downloaded: ${still[*]}"
# Drop .debs of versions that are no longer in the list.
declare -A keep=()
while read -r f _; do keep[$f]=1; done <<<"$DEBLIST"
for f in "$DEBS"/*.deb; do
	[ -n "${keep[$(basename "$f")]:-}" ] || rm -f "$f"
done
npkgs=$(wc -l <<<"$DEBLIST")
log "have $npkgs packages ($(du -sh "$DEBS" | cut -f1))"

# ------------------------------------------------------------------ extract
rm -rf "$STAGE"
mkdir -p "$STAGE"
while read -r f _; do
	dpkg-deb -x "$DEBS/$f" "$STAGE" || die "dpkg-deb -x $f"
done <<<"$DEBLIST"
log "unpacked into $STAGE ($(du -sh "$STAGE" | cut -f1))"
[ -d "$STAGE/lib/modules/$KVER" ] || die "no modules for $KVER in $KPKG"
# The kernel package ships no modules.dep.
depmod -b "$STAGE" "$KVER"

# ------------------------------------------------------------------ root tree
rm -rf "$ROOT"
mkdir -p "$ROOT"/{usr/bin,usr/sbin,usr/local/bin,usr/lib/$ARCHDIR,usr/lib/modules,etc,proc,sys,dev,tmp,run,root,mnt,var/tmp,lab}
ln -s usr/bin "$ROOT/bin"
ln -s usr/sbin "$ROOT/sbin"
ln -s usr/lib "$ROOT/lib"
mkdir -p "$ROOT/lib64"
ln -s ../usr/lib/$ARCHDIR/ld-linux-x86-64.so.2 "$ROOT/lib64/ld-linux-x86-64.so.2"
chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp"

# ---- kernel modules, with their dependencies
MODULES=(
	# RDMA core and soft-RoCE
	ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm rdma_rxe
	# the SRP initiator, and LIO with its SRP target (the reference target)
	ib_srp scsi_transport_srp
	configfs target_core_mod ib_srpt target_core_iblock target_core_file target_core_user tcm_loop
	# SCSI disks
	scsi_mod sd_mod sg scsi_debug
	# block devices and file systems for backstores and data checks
	brd loop null_blk ext4
	# netdevs that can carry rxe
	dummy veth
	# checksums: rxe's ICRC is crc32 (crypto API, loaded via request_module),
	# ext4 uses crc32c, T10-PI crct10dif
	crc32_generic crc32_pclmul crc32c_generic crc32c_intel crct10dif_pclmul
	# virtio, for experiments with a virtio NIC or disk (not used by default)
	virtio_pci virtio_net virtio_blk
	# dm-multipath and the ALUA device handler (multipath -ll over two target ports)
	dm_mod dm_multipath dm_round_robin dm_service_time dm_queue_length scsi_dh_alua
)
out=$(modprobe -d "$STAGE" -S "$KVER" --show-depends -a "${MODULES[@]}" 2>&1) || die "modules: $out"
mapfile -t modpaths < <(awk '$1 == "insmod" {print $2}' <<<"$out" | sort -u)
for p in "${modpaths[@]}"; do
	rel=${p#"$STAGE"/lib/modules/}
	mkdir -p "$ROOT/usr/lib/modules/$(dirname "$rel")"
	cp "$p" "$ROOT/usr/lib/modules/$rel"
done
cp "$STAGE/lib/modules/$KVER"/modules.{builtin,builtin.modinfo,order} "$ROOT/usr/lib/modules/$KVER/"
depmod -b "$ROOT" "$KVER"
log "kernel modules: ${#modpaths[@]} .ko files"

# ---- executables (looked up in the usual bin directories of the unpacked packages)
BINS=(
	bash kmod ip rdma
	ibv_devices ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_asyncwatch
	rping ucmatose udaddy cmtime rstream rdma_server rdma_client
	ib_write_bw ib_read_bw ib_send_bw ib_write_lat ib_read_lat ib_send_lat
	fio
	mke2fs e2fsck tune2fs dumpe2fs
	lsblk blkid findmnt blockdev wipefs chrt
	dd sha256sum md5sum stat
	multipath multipathd
	iscsi-test-cu
)
for f in "$STAGE"/usr/bin/sg_* "$STAGE"/usr/bin/sginfo; do BINS+=("$(basename "$f")"); done
[ "${SRPT_VM_CEPH:-0}" = 1 ] && BINS+=(ceph-mon ceph-osd monmaptool)
find_bin() {
	local d
	for d in usr/bin usr/sbin bin sbin; do
		[ -f "$STAGE/$d/$1" ] && { echo "$STAGE/$d/$1"; return 0; }
	done
	return 1
}
for b in "${BINS[@]}"; do
	src=$(find_bin "$b") || die "executable $b not found in the unpacked packages"
	cp -L "$src" "$ROOT/usr/bin/$b"
done
ln -s mke2fs "$ROOT/usr/bin/mkfs.ext4"
ln -s e2fsck "$ROOT/usr/bin/fsck.ext4"
# /sbin/modprobe must exist: the kernel runs it for request_module(), e.g.
# when rdma_rxe asks the crypto API for crc32.
for l in modprobe insmod rmmod lsmod modinfo depmod; do
	ln -s kmod "$ROOT/usr/bin/$l"
	ln -s ../bin/kmod "$ROOT/usr/sbin/$l"
done
# dlopen()ed verbs provider for soft-RoCE, and its driver file
# and multipath-tools' path checkers and prioritizers, which it dlopen()s from /lib/multipath
PLUGINS=("usr/lib/$ARCHDIR/libibverbs/librxe-rdmav34.so"
	lib/multipath/libchecktur.so lib/multipath/libcheckdirectio.so lib/multipath/libcheckreadsector0.so
	lib/multipath/libprioalua.so lib/multipath/libprioconst.so lib/multipath/libpriosysfs.so)
# the OSD's object classes that librbd calls (image directory, header, locks), dlopen()ed
if [ "${SRPT_VM_CEPH:-0}" = 1 ]; then
	for c in rbd lock journal version log refcount; do PLUGINS+=("usr/lib/$ARCHDIR/rados-classes/libcls_$c.so"); done
fi
for p in "${PLUGINS[@]}"; do
	[ -f "$STAGE/$p" ] || die "missing $p (ibverbs-providers, multipath-tools, ceph-osd)"
	mkdir -p "$ROOT/$(dirname "$p")"
	cp -L "$STAGE/$p" "$ROOT/$p"
done
mkdir -p "$ROOT/etc/libibverbs.d"
cp "$STAGE/etc/libibverbs.d/rxe.driver" "$ROOT/etc/libibverbs.d/"

# ---- shared libraries: the DT_NEEDED closure, resolved inside the unpacked packages
LIBDIRS=("$STAGE/lib/$ARCHDIR" "$STAGE/usr/lib/$ARCHDIR" "$STAGE/lib64" "$STAGE/usr/lib/$ARCHDIR/ceph"
	"$STAGE/usr/lib/$ARCHDIR/e2fsprogs" "$STAGE/lib")
# needed FILE...: "library needer" for every DT_NEEDED entry (one readelf run).
needed() {
	readelf -d "$@" 2>/dev/null | awk '
		/^File: / { f = $2 }
		/\(NEEDED\)/ { sub(/.*\[/, ""); sub(/\].*/, ""); print $0, f }'
}
declare -A seen=()
round=()
for b in "${BINS[@]}"; do round+=("$ROOT/usr/bin/$b"); done
for p in "${PLUGINS[@]}"; do round+=("$ROOT/$p"); done
# glibc's loader, and the NSS modules glibc dlopen()s for getaddrinfo()
EXTRA_LIBS=(ld-linux-x86-64.so.2 libnss_files.so.2 libnss_dns.so.2)
for l in "${EXTRA_LIBS[@]}"; do round+=("$STAGE/lib/$ARCHDIR/$l"); done
libcount=0
# breadth first: the libraries copied in one round are scanned in the next
while [ ${#round[@]} -gt 0 ]; do
	next=()
	while read -r so by; do
		[ -n "${seen[$so]:-}" ] && continue
		seen[$so]=1
		src=
		for d in "${LIBDIRS[@]}"; do
			if [ -e "$d/$so" ]; then src="$d/$so"; break; fi
		done
		[ -n "$src" ] || die "library $so (needed by ${by#"$VMDIR"/}) not found in the unpacked packages"
		cp -L "$src" "$ROOT/usr/lib/$ARCHDIR/$so"
		libcount=$((libcount + 1))
		next+=("$ROOT/usr/lib/$ARCHDIR/$so")
	done < <(needed "${round[@]}")
	round=("${next[@]}")
done
for l in "${EXTRA_LIBS[@]}"; do
	[ -e "$ROOT/usr/lib/$ARCHDIR/$l" ] || { cp -L "$STAGE/lib/$ARCHDIR/$l" "$ROOT/usr/lib/$ARCHDIR/$l"; libcount=$((libcount + 1)); }
done
log "shared libraries: $libcount"

# ---- busybox for everything else; the real binaries above take precedence.
# /bin/sh is bash, not busybox ash: Debian's busybox-static ash runs its own
# applets before anything in PATH (so `ip` would be busybox's, not iproute2's).
ln -s bash "$ROOT/usr/bin/sh"
cp "$STAGE/bin/busybox" "$ROOT/usr/bin/busybox"
for a in $("$STAGE/bin/busybox" --list); do
	[ -e "$ROOT/usr/bin/$a" ] || [ -L "$ROOT/usr/bin/$a" ] || ln -s busybox "$ROOT/usr/bin/$a"
done

# ---- configuration files
[ -d "$STAGE/etc/iproute2" ] && cp -a "$STAGE/etc/iproute2" "$ROOT/etc/"
[ -f "$STAGE/etc/mke2fs.conf" ] && cp "$STAGE/etc/mke2fs.conf" "$ROOT/etc/"
echo "/usr/lib/$ARCHDIR" >"$ROOT/etc/ld.so.conf"
ldconfig -r "$ROOT"
cat >"$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$ROOT/etc/group" <<'EOF'
root:x:0:
disk:x:6:
nogroup:x:65534:
EOF
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n' >"$ROOT/etc/hosts"
echo 'hosts: files' >"$ROOT/etc/nsswitch.conf"
echo srptarget-vm >"$ROOT/etc/hostname"
# LIO's dbroot; target_core_mod logs "db_root: cannot open: /etc/target" without it
mkdir -p "$ROOT/etc/target"
install -m 0755 "$HERE/guest/init" "$ROOT/init"

# ---- smoke test on the host: every executable loads with the libraries in the
# image (same architecture, so the image's own loader can run them in a
# chroot). Executables with the same DT_NEEDED list (the ~90 sg_* tools) are
# checked once; static ones (busybox) have nothing to resolve.
mapfile -t tocheck < <(
	for f in "$ROOT"/usr/bin/* "${PLUGINS[@]/#/$ROOT/}"; do [ -L "$f" ] || echo "$f"; done |
		xargs readelf -d 2>/dev/null | awk -v root="$ROOT" '
			/^File: / { f = $2; sub("^" root, "", f); files[f] = 1 }
			/\(NEEDED\)/ { sig[f] = sig[f] " " $NF }
			END { for (f in sig) if (!(sig[f] in seen)) { seen[sig[f]] = 1; print f } }')
# shellcheck disable=SC2016 # expanded by the chroot's bash
bad=$(chroot "$ROOT" /usr/bin/bash -c '
	for f in "$@"; do
		out=$(/lib64/ld-linux-x86-64.so.2 --list "$f" 2>&1) || { echo "$f: $out"; continue; }
		case $out in *"not found"*) echo "$f:"; grep "not found" <<<"$out" ;; esac
	done' _ "${tocheck[@]}")
[ -z "$bad" ] || { echo "$bad" >&2; die "some executables would not load in the guest"; }
for c in "bash -c true" "busybox true" "lsblk --version" "fio --version" "mke2fs -V" "sg_inq --version" \
	"rdma -V" "ip -V" "kmod --version" "dd --version" "sha256sum --version"; do
	# shellcheck disable=SC2086 # word splitting of the command line is intended
	chroot "$ROOT" /usr/bin/$c >/dev/null 2>&1 || die "chroot smoke test failed: $c"
done
log "chroot smoke test: ${#tocheck[@]} distinct library sets resolve, sample commands run"

# ------------------------------------------------------------------ pack
cp "$STAGE/boot/vmlinuz-$KVER" "$OUT/vmlinuz.tmp"
(cd "$ROOT" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) |
	gzip -1 >"$OUT/initramfs.cpio.gz.tmp"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"
{
	echo "kernel: $KPKG ($KVER)"
	echo "built: $(date -u +%FT%TZ)"
	echo "key: $KEY"
	echo "vmlinuz: $(stat -c %s "$OUT/vmlinuz") bytes"
	echo "initramfs: $(stat -c %s "$OUT/initramfs.cpio.gz") bytes compressed, $(du -sb "$ROOT" | cut -f1) bytes unpacked"
	echo "executables: ${BINS[*]}"
	echo "modules (${#modpaths[@]} .ko with dependencies): ${MODULES[*]}"
	echo "shared libraries: $libcount"
	echo "build seconds: $(elapsed)"
	echo "packages ($npkgs):"
	awk '{print "  " $1}' <<<"$DEBLIST"
} >"$OUT/manifest.txt"
echo "$KEY" >"$OUT/key"
[ -n "${SRPT_VM_KEEP_STAGE:-}" ] || rm -rf "$STAGE"
log "done: $OUT/vmlinuz $OUT/initramfs.cpio.gz ($(du -h "$OUT/initramfs.cpio.gz" | cut -f1)), $npkgs packages"
