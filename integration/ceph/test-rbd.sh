#!/usr/bin/env bash
# make test-rbd: the RBD backstore against a throw-away cluster (cluster.sh): the backstore
# conformance suite and the RBD tests (resize watch, no allocations per I/O, the OSD stopped
# with SIGSTOP), the daemon end to end over the in-memory fabric with an RBD LUN, the shared
# persistent reservations (RADOS omap, watch and notify; two gateways' caches through the
# state machine table and a race checked against a model, a gateway blocklisted at the OSDs,
# one killed between storing a PREEMPT and telling the other; SET TARGET PORT GROUPS through one
# gateway seen through the other;
# two daemons over the in-memory fabric sharing an image's reservations), then a short
# benchmark of the backstore beside `rbd bench` on the same cluster and image size.
# RBD_BENCH=0 skips the benchmark, RBD_TESTS=0 the tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
HERE=integration/ceph

if [ -z "${SRPT_RBD_CONF:-}" ]; then
	exec "$HERE/cluster.sh" run "$0" "$@"
fi

if [ "${RBD_TESTS:-1}" != 0 ]; then
	echo "test-rbd: go test -tags rbd (cluster $SRPT_RBD_CONF, pool $SRPT_RBD_POOL)"
	# -p 1: one package at a time. The one OSD of this cluster, in RAM on a machine that
	# runs the backstore's conformance suite meanwhile, was seen to take more than 5 s for
	# an omap write, which the shared reservations' tests would take for a cut-off gateway.
	"$GO" test -tags rbd -race -count=1 -p 1 -run 'RBD|RADOS|Conformance/rbd|TestObject|TwoGateways|CompareAndWriteLimits' ./backstore/ ./backstore/rbd/ ./scsi/ ./internal/daemon/
fi

[ "${RBD_BENCH:-1}" = 0 ] && exit 0
# The same load both ways: 4 KiB random, 32 in flight, RBD_BENCH_IOS (16384) I/Os per direction over a 64 MiB
# image, each in a process of its own, timed: CPU per I/O is the process's user+system time
# (librados' threads included) over the I/Os.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" test -tags rbd -c -o "$tmp/backstore.test" ./backstore/
TIMEFORMAT='%R %U %S'
ios=${RBD_BENCH_IOS:-16384}
report() { # NAME TIMEFILE: IOPS from the wall time, CPU µs per I/O
	read -r real user sys <"$2"
	awk -v n="$1" -v r="$real" -v u="$user" -v s="$sys" -v ios="$ios" \
		'BEGIN { printf "%-28s %7.0f IOPS  %5.0f us CPU/IO  (%.2f s, %d I/Os)\n", n, ios / r, (u + s) * 1e6 / ios, r, ios }'
}
img=bench-$$
timeout 30 rbd create --size 64M "$SRPT_RBD_POOL/$img"
for t in write read; do
	{ time timeout 120 rbd bench --io-type "$t" --io-size 4K --io-threads 32 --io-total $((ios * 4))K \
		--io-pattern rand "$SRPT_RBD_POOL/$img" >/dev/null 2>&1; } 2>"$tmp/time"
	report "rbd bench 4k rand $t" "$tmp/time"
done
timeout 30 rbd rm "$SRPT_RBD_POOL/$img" >/dev/null 2>&1
for t in write read; do
	# set -e would end the script on a failed run without a word: say what the run printed.
	if ! { time "$tmp/backstore.test" -test.run '^$' -test.bench "BenchmarkRBD/$t" -test.benchtime ${ios}x \
		-test.benchmem >"$tmp/out" 2>&1; } 2>"$tmp/time"; then
		cat "$tmp/out"
		echo "test-rbd: BenchmarkRBD/$t failed" >&2
		exit 1
	fi
	grep -q '0 allocs/op' "$tmp/out" || { cat "$tmp/out"; echo "test-rbd: BenchmarkRBD/$t allocates" >&2; exit 1; }
	report "backstore RBD 4k rand $t" "$tmp/time"
done
