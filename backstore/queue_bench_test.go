package backstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/internal/testutil"
)

// The random-read benchmarks against fio (integration/uring/bench.sh runs them on tmpfs and on
// ext4): 4 KiB random reads at queue depth 32 from one file, through a Queue as a poll loop
// would drive it, and through fio's io_uring engine, on the same file and the same CPUs (this
// process's affinity; run it under taskset). Each reports IOPS and cpu-ns/op, the process's
// user + system time per I/O.
//
//	SRPT_URING_FILE   the file to read (at least 64 MiB); default: a 64 MiB file in a
//	                  temporary directory
//	SRPT_URING_DIRECT 1: O_DIRECT for both (File's Direct, fio's --direct=1)
const (
	benchBlock = 4096
	benchDepth = 32
)

// benchFile returns the path the random-read benchmarks read, its size and whether they use
// O_DIRECT.
func benchFile(b *testing.B) (string, int64, bool) {
	direct := os.Getenv("SRPT_URING_DIRECT") == "1"
	path := os.Getenv("SRPT_URING_FILE")
	if path == "" {
		path = filepath.Join(b.TempDir(), "randread.img")
		data := make([]byte, 64<<20)
		fillPattern(data, 0, 1)
		require.NoError(b, os.WriteFile(path, data, 0o600))
	}
	st, err := os.Stat(path)
	require.NoError(b, err)
	require.GreaterOrEqual(b, st.Size(), int64(64<<20), "%s is smaller than 64 MiB", path)
	return path, st.Size() / benchBlock * benchBlock, direct
}

// BenchmarkQueueRandRead4K keeps 32 reads in flight: each pass waits for a completion (one
// io_uring_enter that also submits what the previous pass started), reaps every completion
// there is and starts a new read at a random block for each.
func BenchmarkQueueRandRead4K(b *testing.B) {
	path, size, direct := benchFile(b)
	f, err := OpenFile(path, FileOptions{Direct: direct, AllowSharedFile: true, ReadOnly: true})
	require.NoError(b, err)
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	q, err := NewQueue(benchDepth, true)
	if errors.Is(err, ErrAsyncUnsupported) {
		b.Skipf("io_uring not available: %v", err)
	}
	require.NoError(b, err)
	defer q.Close()
	slab := alignedBuf(b, benchDepth*benchBlock)
	require.NoError(b, q.RegisterBuffer(slab))
	rng := rand.New(rand.NewPCG(3, 4))
	blocks := uint64(size / benchBlock)
	started := 0
	start := func(slot uint64) {
		off := int64(rng.Uint64N(blocks)) * benchBlock
		if err := f.StartRead(q, slab[slot*benchBlock:(slot+1)*benchBlock], off, slot); err != nil {
			b.Fatal(err)
		}
		started++
	}
	var failed error
	onDone := func(c Completion) {
		if c.Err != nil {
			failed = c.Err
		}
		if started < b.N {
			start(c.Tag)
		}
	}
	b.ResetTimer()
	cpu0, t0 := testutil.CPUTime(b), time.Now()
	for slot := uint64(0); slot < benchDepth && started < b.N; slot++ {
		start(slot)
	}
	for q.InFlight() > 0 {
		if q.Reap(onDone) == 0 {
			if err := q.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	}
	elapsed, cpu := time.Since(t0), testutil.CPUTime(b)-cpu0
	b.StopTimer()
	require.NoError(b, failed)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "IOPS")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkFioRandRead4K runs fio's io_uring engine for b.N reads of the same shape on the
// same file, pinned to this process's CPUs, and reports its IOPS and the user + system time
// of the whole fio process per I/O (and, as job-cpu-ns/op, fio's own figure for its job).
// The page cache is left as it is (--invalidate=0), as the Queue leaves it.
func BenchmarkFioRandRead4K(b *testing.B) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		b.Skip("fio not installed")
	}
	path, size, direct := benchFile(b)
	var set unix.CPUSet
	require.NoError(b, unix.SchedGetaffinity(0, &set))
	var cpus []string
	for c := 0; c < 1024; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, strconv.Itoa(c))
		}
	}
	d := "0"
	if direct {
		d = "1"
	}
	b.ResetTimer()
	cmd := exec.Command(fio, "--name=randread", "--filename="+path, "--ioengine=io_uring", "--rw=randread",
		"--bs=4k", fmt.Sprintf("--iodepth=%d", benchDepth), "--direct="+d, "--norandommap", "--randrepeat=0", "--invalidate=0",
		fmt.Sprintf("--size=%d", size), fmt.Sprintf("--io_size=%d", int64(b.N)*benchBlock), "--cpus_allowed="+strings.Join(cpus, ","),
		"--output-format=json")
	out, err := cmd.Output()
	b.StopTimer()
	require.NoError(b, err, "fio: %s", out)
	// fio's CPU as the Queue's is counted: the whole process, its job and the kernel's
	// io_uring worker threads included (fio's own usr_cpu and sys_cpu are its job's)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var res struct {
		Jobs []struct {
			Read struct {
				IOPS     float64 `json:"iops"`
				TotalIOs int64   `json:"total_ios"`
			} `json:"read"`
			UsrCPU     float64 `json:"usr_cpu"`
			SysCPU     float64 `json:"sys_cpu"`
			JobRuntime float64 `json:"job_runtime"` // ms
		} `json:"jobs"`
	}
	require.NoError(b, json.Unmarshal(out, &res), "fio's output: %s", out)
	require.Len(b, res.Jobs, 1)
	j := res.Jobs[0]
	require.Positive(b, j.Read.TotalIOs)
	b.ReportMetric(j.Read.IOPS, "IOPS")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(j.Read.TotalIOs), "cpu-ns/op")
	b.ReportMetric((j.UsrCPU+j.SysCPU)/100*j.JobRuntime*1e6/float64(j.Read.TotalIOs), "job-cpu-ns/op")
}

// BenchmarkReadAtRandRead4K is today's worker path for comparison: 32 goroutines, each a
// blocking ReadAt (pread) of a random 4 KiB block at a time, as 32 commands in the workers'
// hands would be.
func BenchmarkReadAtRandRead4K(b *testing.B) {
	path, size, direct := benchFile(b)
	f, err := OpenFile(path, FileOptions{Direct: direct, AllowSharedFile: true, ReadOnly: true})
	require.NoError(b, err)
	defer f.Close()
	slab := alignedBuf(b, benchDepth*benchBlock)
	blocks := uint64(size / benchBlock)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchDepth)
	b.ResetTimer()
	cpu0, t0 := testutil.CPUTime(b), time.Now()
	for w := 0; w < benchDepth; w++ {
		wg.Add(1)
		go func(w uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(5, w))
			p := slab[w*benchBlock : (w+1)*benchBlock]
			for next.Add(1) <= int64(b.N) {
				if err := f.ReadAt(p, int64(rng.Uint64N(blocks))*benchBlock); err != nil {
					errs <- err
					return
				}
			}
		}(uint64(w))
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), testutil.CPUTime(b)-cpu0
	b.StopTimer()
	close(errs)
	require.NoError(b, <-errs)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "IOPS")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
