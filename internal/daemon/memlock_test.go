package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
)

func TestMemlockNeed(t *testing.T) {
	page := int64(os.Getpagesize())
	pages := func(n int64) int64 { return (n + page - 1) / page * page }
	// The defaults: 129 receive buffers of 8276 bytes, padded for 512-byte aligned immediate
	// data to 9216, and 258 send buffers of 256 bytes: 1,254,912 bytes, in pages.
	defaultChannel := pages(129*9216 + 258*256)
	cases := []struct {
		name        string
		lim         config.Limits
		devices     int
		wantPool    int64
		wantChannel int64
	}{
		{name: "defaults", lim: config.Limits{BufferPoolSize: 64 << 20, MaxTransferSize: 8 << 20, Credits: 128, MaxIUSize: 8276, MaxChannels: 16},
			devices: 1, wantPool: 64 << 20, wantChannel: defaultChannel},
		{name: "two devices", lim: config.Limits{BufferPoolSize: 64 << 20, MaxTransferSize: 8 << 20, Credits: 128, MaxIUSize: 8276, MaxChannels: 16},
			devices: 2, wantPool: 64 << 20, wantChannel: defaultChannel},
		{name: "no device found counts one", lim: config.Limits{BufferPoolSize: 16 << 20, MaxTransferSize: 8 << 20, Credits: 128, MaxIUSize: 8276, MaxChannels: 4},
			devices: 0, wantPool: 16 << 20, wantChannel: defaultChannel},
		{name: "pool rounded to whole largest buffers", lim: config.Limits{BufferPoolSize: 10 << 20, MaxTransferSize: 3 << 20, Credits: 128, MaxIUSize: 8276, MaxChannels: 1},
			devices: 1, wantPool: 12 << 20, wantChannel: defaultChannel},
		{name: "small channels", lim: config.Limits{BufferPoolSize: 4096, MaxTransferSize: 4096, Credits: 16, MaxIUSize: 276, MaxChannels: 256},
			devices: 1, wantPool: 4096, wantChannel: pages(17*1024 + 34*256)},
		{name: "large IUs", lim: config.Limits{BufferPoolSize: 64 << 20, MaxTransferSize: 64 << 20, Credits: 128, MaxIUSize: 1 << 20, MaxChannels: 16},
			devices: 1, wantPool: 64 << 20, wantChannel: pages(129*(1<<20+512) + 258*256)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			need, pool, channel := memlockNeed(&c.lim, c.devices)
			require.Equal(t, c.wantPool, pool)
			require.Equal(t, c.wantChannel, channel)
			require.Equal(t, int64(max(c.devices, 1))*c.wantPool+int64(c.lim.MaxChannels)*c.wantChannel, need)
		})
	}
	// What the documentation says: about 1.2 MiB per channel with the defaults.
	require.Equal(t, "1.2 MiB", HumanBytes(defaultChannel))
}

func TestMemlockVerdict(t *testing.T) {
	const need, pool, channel = 84 << 20, 64 << 20, 1257472
	inf := uint64(unix.RLIM_INFINITY)
	cases := []struct {
		name      string
		state     memlockState
		wantRaise uint64
		wantErr   []string
	}{
		{name: "CAP_IPC_LOCK, low limit", state: memlockState{capIPCLock: true, cur: 64 << 10, max: 64 << 10}},
		{name: "unlimited", state: memlockState{cur: inf, max: inf}},
		{name: "soft limit enough", state: memlockState{cur: need, max: need}},
		{name: "hard limit enough: raise", state: memlockState{cur: 8 << 20, max: 1 << 30}, wantRaise: 1 << 30},
		{name: "hard limit unlimited: raise", state: memlockState{cur: 8 << 20, max: inf}, wantRaise: inf},
		{name: "systemd's default 8 MiB", state: memlockState{cur: 8 << 20, max: 8 << 20}, wantErr: []string{
			"locked memory: RLIMIT_MEMLOCK is 8 MiB (hard limit 8 MiB) and srptarget has no CAP_IPC_LOCK, but it registers (pins) at least 84 MiB: " +
				"a 64 MiB buffer pool for each of 1 RDMA device(s) and 1.2 MiB for each of the 16 channels (limits.max_channels) one initiator may open; " +
				"beyond the limit every login would be refused with INSUFFICIENT RESOURCES.",
			"LimitMEMLOCK=infinity in the systemd unit", "`ulimit -l unlimited`", "AmbientCapabilities=CAP_IPC_LOCK",
		}},
		{name: "docker's default 64 KiB", state: memlockState{cur: 64 << 10, max: 64 << 10}, wantErr: []string{"RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raise, err := memlockVerdict(need, pool, channel, 1, 16, c.state)
			if c.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, c.wantRaise, raise)
				return
			}
			require.Zero(t, raise)
			for _, want := range c.wantErr {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

// TestReadMemlockState compares capget(2) with the CapEff line of /proc/self/status, and the
// limit with getrlimit, and checks that a need of one byte is met here.
func TestReadMemlockState(t *testing.T) {
	s, err := readMemlockState()
	require.NoError(t, err)
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	var capEff uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			capEff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
		}
	}
	require.Equal(t, capEff&(1<<unix.CAP_IPC_LOCK) != 0, s.capIPCLock)
	var rl unix.Rlimit
	require.NoError(t, unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl))
	require.Equal(t, rl.Cur, s.cur)
	require.Equal(t, rl.Max, s.max)

	got, err := ensureMemlock(1, 1, 1, 1, 1)
	require.NoError(t, err)
	require.Zero(t, got.raisedFrom)
}

// TestServeChecksLockedMemory: serve asks about the memory of its configuration before it
// opens anything, and does not start when it cannot be pinned.
func TestServeChecksLockedMemory(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig) // buffer_pool_size 16MiB, other limits at their defaults
	type call struct {
		need, pool, channel int64
		devices, channels   int
	}
	calls := make(chan call, 1)
	e.opts.memlock = func(need, pool, channel int64, devices, channels int) (memlockState, error) {
		calls <- call{need, pool, channel, devices, channels}
		_, err := memlockVerdict(need, pool, channel, devices, channels, memlockState{cur: 8 << 20, max: 8 << 20})
		return memlockState{}, err
	}
	require.Equal(t, ExitError{1}, runServe(e.opts))
	got := <-calls
	_, _, channel := memlockNeed(&config.Limits{BufferPoolSize: 16 << 20, MaxTransferSize: config.DefaultMaxTransferSize,
		Credits: config.DefaultCredits, MaxIUSize: config.DefaultMaxIUSize, MaxChannels: config.DefaultMaxChannels}, 1)
	require.Equal(t, call{need: 16<<20 + config.DefaultMaxChannels*channel, pool: 16 << 20, channel: channel, devices: 1, channels: config.DefaultMaxChannels}, got)
	entries := e.Logs.FilterMessage("start-up failed").All()
	require.Len(t, entries, 1, e.LogText())
	require.Contains(t, entries[0].ContextMap()["error"], "RLIMIT_MEMLOCK is 8 MiB (hard limit 8 MiB)")
	_, err := os.Stat(e.Dir + "/lun1.img")
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was opened")

	// Raised to the hard limit: the daemon starts and says so.
	e = newEnv(t, daemontest.E2EConfig)
	e.opts.memlock = func(need, pool, channel int64, devices, channels int) (memlockState, error) {
		return memlockState{cur: 1 << 30, max: 1 << 30, raisedFrom: 8 << 20}, nil
	}
	e.start()
	require.Equal(t, 1, e.Count("raised the soft RLIMIT_MEMLOCK to the hard limit, for the memory registered for RDMA", "from", "8 MiB", "to", "1024 MiB"))
	require.NoError(t, e.Stop(unix.SIGTERM))
}
