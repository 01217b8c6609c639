#!/usr/bin/env bash
# make test-rbd: the RBD backstore against a throw-away cluster (cluster.sh): the backstore
# conformance suite and the RBD tests (resize watch, no allocations per I/O, the OSD stopped
# with SIGSTOP), the daemon end to end over the in-memory fabric with an RBD LUN, then a short
# benchmark of the backstore beside `rbd bench` on the same cluster and image size.
# RBD_BENCH=0 skips the benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
HERE=integration/ceph

if [ -z "${SRPT_RBD_CONF:-}" ]; then
	exec "$HERE/cluster.sh" run "$0" "$@"
fi

echo "test-rbd: go test -tags rbd (cluster $SRPT_RBD_CONF, pool $SRPT_RBD_POOL)"
"$GO" test -tags rbd -race -count=1 -run 'RBD|Conformance/rbd' ./backstore/ ./backstore/rbd/ ./cmd/srptarget/

[ "${RBD_BENCH:-1}" = 0 ] && exit 0
# The same load both ways: 4 KiB random, 32 in flight, 8192 I/Os per direction over 64 MiB.
echo "test-rbd: rbd bench (librbd's own tool, 32 threads)"
img=bench-$$
timeout 30 rbd create --size 64M "$SRPT_RBD_POOL/$img"
for t in write read; do
	timeout 120 rbd bench --io-type "$t" --io-size 4K --io-threads 32 --io-total 32M --io-pattern rand \
		"$SRPT_RBD_POOL/$img" 2>/dev/null | awk -v t="$t" '/^elapsed/ { print "rbd bench 4k rand " t ": " $6 " IOPS" }'
done
timeout 30 rbd rm "$SRPT_RBD_POOL/$img" >/dev/null 2>&1
echo "test-rbd: the backstore (BenchmarkRBD: 32 goroutines, each submit-then-wait, as SCSI workers)"
"$GO" test -tags rbd -count=1 -run '^$' -bench 'BenchmarkRBD' -benchmem -benchtime 8192x ./backstore/ |
	awk '/^BenchmarkRBD/ { printf "%s: %.0f IOPS, %s allocs/op\n", $1, 1e9 / $3, $(NF-1) }'
