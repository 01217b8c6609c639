package daemon

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/config"
)

// policies returns the scheduling policy of every thread of the process.
func policies(t *testing.T) map[int]uint32 {
	t.Helper()
	tids, err := threadIDs()
	require.NoError(t, err)
	out := map[int]uint32{}
	for _, tid := range tids {
		attr, err := unix.SchedGetAttr(tid, 0)
		if err == unix.ESRCH {
			continue
		}
		require.NoError(t, err)
		out[tid] = attr.Policy
	}
	return out
}

// TestSetScheduling: batch reaches every thread of the process, threads started afterwards
// inherit it, and normal puts them all back.
func TestSetScheduling(t *testing.T) {
	require.NoError(t, setScheduling(config.SchedulingBatch))
	t.Cleanup(func() { require.NoError(t, setScheduling(config.SchedulingNormal)) })
	for tid, p := range policies(t) {
		require.Equal(t, uint32(unix.SCHED_BATCH), p, "thread %d", tid)
	}

	// Goroutines locked to their threads while they all wait make the runtime start threads:
	// as many as it takes for a new one to appear.
	before := policies(t)
	var release sync.WaitGroup
	release.Add(1)
	defer release.Done()
	fresh := 0
	for i := 0; fresh == 0 && i < 256; i++ {
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			close(locked)
			release.Wait()
		}()
		<-locked
		for tid, p := range policies(t) {
			if _, old := before[tid]; !old {
				fresh++
				require.Equal(t, uint32(unix.SCHED_BATCH), p, "thread %d, started after the switch", tid)
			}
		}
	}
	require.NotZero(t, fresh, "no thread was started")

	require.NoError(t, setScheduling(config.SchedulingNormal))
	for tid, p := range policies(t) {
		require.Equal(t, uint32(unix.SCHED_NORMAL), p, "thread %d", tid)
	}
	require.Error(t, setScheduling("fifo"))
}

// TestDaemonScheduling: the daemon applies limits.scheduling at start-up, leaves the policy
// alone with inherit, and logs a policy it could not apply without failing the start.
func TestDaemonScheduling(t *testing.T) {
	for _, tc := range []struct {
		name, setting string
		fail          bool
		want          []string // policies the hook was called with
		logged        string
	}{
		{"batch", "batch", false, []string{"batch"}, "scheduling policy"},
		{"normal", "normal", false, []string{"normal"}, "scheduling policy"},
		{"inherit", "inherit", false, nil, ""},
		{"refused", "batch", true, []string{"batch"}, "could not set the threads' scheduling policy; running with the one inherited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "target: {id_ext: \"0x0002c90300a34270\", ioc_guid: \"0x0002c90300a34270\"}\nlisteners: [{address: 192.0.2.1, port: 5555}]\nlimits: {scheduling: "+tc.setting+"}\n"+
				"luns: [{lun: 0, backstore: memory, size: 1MiB}]\nacls: [{initiators: [\"*\"], luns: [0]}]\n")
			var got []string
			e.opts.sched = func(policy string) error {
				got = append(got, policy)
				if tc.fail {
					return unix.EPERM
				}
				return nil
			}
			e.start()
			require.NoError(t, e.Stop(syscall.SIGTERM))
			require.Equal(t, tc.want, got)
			if tc.logged != "" {
				require.Equal(t, 1, e.Count(tc.logged, "scheduling", tc.setting), e.LogText())
			}
		})
	}
}
