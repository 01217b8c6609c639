#!/bin/bash
# The daemon on a host without RDMA (this build machine, CI): `srptarget serve` starts and
# stays up waiting for a device, `srptarget status` answers on the control socket, says that
# it waits and exits 4, the other commands answer (luns), status exits 3 without a daemon, the
# metrics endpoint answers (when the binary has --metrics), and SIGTERM stops it at once.
# Uses bin/srptarget (make build). Run from anywhere; `make nordma-test` runs it.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/srptarget}
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }
if ls /sys/class/infiniband/* >/dev/null 2>&1; then
	echo "this host has RDMA devices: the test needs one without; skipped"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
chmod 0755 "$dir"
cat >"$dir/srptarget.yaml" <<YAML
target: {id_ext: "0x0002c90300a0b0c1", ioc_guid: "0x0002c90300a0b0c1"}
listeners: [{address: "0.0.0.0", port: 5555}]
luns: [{lun: 0, backstore: memory, size: 16MiB}]
acls: [{initiators: ["*"], luns: [0]}]
YAML
chmod 0644 "$dir/srptarget.yaml"
args=(serve --config "$dir/srptarget.yaml" --control "$dir/control.sock")
metrics=
if "$BIN" serve --help 2>&1 | grep -q -- '--metrics'; then
	port=$((20000 + RANDOM % 20000))
	metrics=127.0.0.1:$port
	args+=(--metrics "$metrics")
fi
"$BIN" "${args[@]}" >"$dir/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	out=$("$BIN" status --control "$dir/control.sock" 2>&1)
	rc=$?
	[ $rc != 3 ] && break # 3: no daemon answers yet
	sleep 0.1
done
passed=0
if [ "$rc" = 4 ] && grep -q 'waiting for an RDMA device' <<<"$out"; then
	ok "status answers while serve waits, exit 4 (not serving): $(grep -m1 -i 'state\|waiting' <<<"$out")"
	passed=$((passed + 1))
else
	bad "status (exit $rc): $out"
fi
if out=$("$BIN" luns --control "$dir/control.sock" 2>&1) && grep -q '^LUN 0: memory' <<<"$out"; then
	ok "luns answers while waiting: $(head -1 <<<"$out")"
	passed=$((passed + 1))
else
	bad "luns: $out"
fi
"$BIN" status --control "$dir/nothing.sock" >/dev/null 2>&1
rc=$?
if [ "$rc" = 3 ]; then
	ok "status exits 3 when no daemon answers"
	passed=$((passed + 1))
else
	bad "status without a daemon: exit $rc"
fi
if [ -n "$metrics" ]; then
	if body=$(curl -fsS "http://$metrics/metrics" 2>&1 || wget -qO- "http://$metrics/metrics" 2>&1) &&
		grep -q '^srptarget_serving 0$' <<<"$body"; then
		ok "/metrics answers: srptarget_serving 0 while it waits"
		passed=$((passed + 1))
	else
		bad "/metrics: $(head -3 <<<"$body")"
	fi
fi
kill -TERM "$pid"
start=$(date +%s%N)
for _ in $(seq 50); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
	bad "still running 5 s after SIGTERM"
else
	wait "$pid"
	rc=$?
	ms=$((($(date +%s%N) - start) / 1000000))
	if [ "$rc" = 0 ]; then
		ok "SIGTERM stopped it in $ms ms, exit 0"
		passed=$((passed + 1))
	else
		bad "exit status $rc after SIGTERM"
	fi
	pid=
fi
[ -e "$dir/control.sock" ] && bad "the control socket was left behind"
if [ "$fail" != 0 ]; then
	echo "daemon log:"
	cat "$dir/daemon.log"
fi
echo "$passed passed, $fail failed"
exit "$fail"
