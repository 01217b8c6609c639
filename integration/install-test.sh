#!/bin/sh
# make install into temporary DESTDIRs (PREFIX=/usr/local, the default, then PREFIX=/usr):
# lists what it wrote and checks the layout, that an existing srptarget.yaml is left alone,
# that the unit's ExecStart= names the installed binary, that the man pages render, and, where
# systemd-analyze exists, `systemd-analyze verify` on the installed unit (with ExecStart=
# pointing into DESTDIR and MANPATH at the installed pages, so that its checks of the binary
# and of Documentation=man: see them). Run from anywhere; `make install-test` runs it.
set -eu
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
dirs=
trap 'rm -rf $dirs' EXIT

check() { # check PREFIX
	prefix=$1
	dest=$(mktemp -d)
	dirs="$dirs $dest"
	mkdir -p "$dest/etc/srptarget"
	echo "# the operator's own configuration" >"$dest/etc/srptarget/srptarget.yaml"
	if ! out=$($MAKE --no-print-directory install DESTDIR="$dest" PREFIX="$prefix" 2>&1); then
		echo "$out"
		bad "make install DESTDIR=$dest PREFIX=$prefix"
		return
	fi
	echo "== make install DESTDIR=\$DESTDIR PREFIX=$prefix"
	(cd "$dest" && find . -type f -printf '%m %p\n' | sort -k2)
	for f in \
		"755 .$prefix/bin/srptarget" \
		"644 .$prefix/lib/systemd/system/srptarget.service" \
		"644 ./etc/sysusers.d/srptarget.conf" \
		"644 ./etc/srptarget/srptarget.yaml.example" \
		"644 .$prefix/share/man/man1/srptarget.1" \
		"644 .$prefix/share/man/man1/srptarget-serve.1" \
		"644 .$prefix/share/man/man1/srptarget-validate.1" \
		"644 .$prefix/share/man/man1/srptarget-login-line.1" \
		"644 .$prefix/share/bash-completion/completions/srptarget" \
		"644 .$prefix/share/zsh/site-functions/_srptarget" \
		"644 .$prefix/share/fish/vendor_completions.d/srptarget.fish" \
		"644 .$prefix/share/srptarget/monitoring/srptarget-dashboard.json" \
		"644 .$prefix/share/srptarget/monitoring/srptarget-alerts.yml"; do
		mode=${f%% *} path=${f#* }
		got=$(cd "$dest" && stat -c %a "$path" 2>/dev/null) || { bad "$path not installed"; continue; }
		[ "$got" = "$mode" ] || bad "$path has mode $got, want $mode"
	done
	[ "$(cat "$dest/etc/srptarget/srptarget.yaml")" = "# the operator's own configuration" ] ||
		bad "make install changed an existing srptarget.yaml"
	cmp -s configs/example.yaml "$dest/etc/srptarget/srptarget.yaml.example" || bad "srptarget.yaml.example is not configs/example.yaml"
	unit=$dest$prefix/lib/systemd/system/srptarget.service
	grep -qx "ExecStart=$prefix/bin/srptarget serve --config /etc/srptarget/srptarget.yaml" "$unit" ||
		bad "ExecStart= of the installed unit: $(grep ExecStart= "$unit")"
	grep -qx "ExecReload=$prefix/bin/srptarget reload" "$unit" ||
		bad "ExecReload= of the installed unit: $(grep ExecReload= "$unit")"
	"$dest$prefix/bin/srptarget" version >/dev/null || bad "the installed binary does not run"
	grep -q 'complete -o default .*-F __start_srptarget srptarget' "$dest$prefix/share/bash-completion/completions/srptarget" ||
		bad "bash completion"
	if command -v man >/dev/null; then
		MANPATH=$dest$prefix/share/man man srptarget-serve 2>/dev/null | grep -q -- '--config' || bad "man srptarget-serve"
	fi
	if command -v systemd-analyze >/dev/null; then
		v=$(mktemp -d)
		dirs="$dirs $v"
		sed "s|^\(Exec[A-Za-z]*\)=$prefix/bin/srptarget|\1=$dest$prefix/bin/srptarget|" "$unit" >"$v/srptarget.service"
		if out=$(MANPATH=$dest$prefix/share/man systemd-analyze verify "$v/srptarget.service" 2>&1) && [ -z "$out" ]; then
			echo "systemd-analyze verify: clean"
		else
			bad "systemd-analyze verify: $out"
		fi
	else
		echo "systemd-analyze not found: the unit is not verified"
	fi
}

check /usr/local
check /usr
[ $fail = 0 ] && echo "PASS: make install" || { echo "FAIL: make install"; exit 1; }
