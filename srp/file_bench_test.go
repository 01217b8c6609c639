package srp_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
)

// BenchmarkFileLUNRandRead4K reads random 4 KiB blocks at queue depth 32 from a file LUN
// through the whole engine (initiator → memfabric → target → file backstore and back), with
// each backstore I/O engine: the poll group's io_uring and the blocking reads on workers. The
// file is SRPT_URING_FILE (at least 64 MiB; integration/uring/bench.sh passes the one fio
// reads, on tmpfs and on ext4), opened with O_DIRECT when SRPT_URING_DIRECT=1, else a 64 MiB
// file in a temporary directory. IOPS and cpu-ns/op (the process's user + system time per
// read, the initiator's and the fabric's included) compare with BenchmarkFioRandRead4K in
// package backstore on the same file and CPUs.
func BenchmarkFileLUNRandRead4K(b *testing.B) {
	for _, engine := range []srp.BackstoreIO{srp.BackstoreIOURing, srp.BackstoreIOSync} {
		b.Run(engine.String(), func(b *testing.B) {
			if engine == srp.BackstoreIOURing {
				if _, why := srp.ResolveBackstoreIO(srp.BackstoreIOAuto); why != nil {
					b.Skipf("io_uring does not work here: %v", why)
				}
			}
			benchFileLUN(b, engine)
		})
	}
}

func benchFileLUN(b *testing.B, engine srp.BackstoreIO) {
	const qd = 32
	path := os.Getenv("SRPT_URING_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "randread.img")
		data := make([]byte, 64<<20)
		for i := range data {
			data[i] = byte(i*7 + i>>12)
		}
		require.NoError(b, os.WriteFile(path, data, 0o600))
	}
	f, err := backstore.OpenFile(path, backstore.FileOptions{ReadOnly: true, AllowSharedFile: true,
		Direct: os.Getenv("SRPT_URING_DIRECT") == "1"})
	require.NoError(b, err)
	size := f.Size()
	require.GreaterOrEqual(b, size, int64(64<<20), "%s is smaller than 64 MiB", path)
	h := newHarness(b, harnessOpts{lun0: f, logLevel: zapcore.ErrorLevel,
		limits: srp.Limits{BufferPoolSize: 8 << 20, BackstoreIO: engine}})
	r := newRawInitiator(b, h, qd)
	defer r.close()
	r.blocks4K, r.rng = uint64(size/benchIO), 0x9E3779B97F4A7C15
	r.run(b, 4, 0x00, false) // the POWER ON unit attention
	if bad := r.run(b, 2*srp.DefaultSendQueueDepth+qd, 0x28, false); bad != 0 {
		b.Fatalf("%d reads failed", bad)
	}
	started0, _ := h.tgt.BackstoreIOCounts()
	b.ReportAllocs()
	b.SetBytes(benchIO)
	cpu0 := testutil.CPUTime(b)
	b.ResetTimer()
	if bad := r.run(b, b.N, 0x28, false); bad != 0 {
		b.Fatalf("%d reads failed", bad)
	}
	b.StopTimer()
	cpu := testutil.CPUTime(b) - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "IOPS")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	started, _ := h.tgt.BackstoreIOCounts()
	if engine == srp.BackstoreIOURing {
		require.Equal(b, uint64(b.N), started-started0, "every read went through the ring")
	} else {
		require.Equal(b, started0, started)
	}
}
