package daemon

import (
	"fmt"
	"math/bits"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/srp"
)

// Registered memory is pinned: the kernel counts it against RLIMIT_MEMLOCK and refuses a
// registration beyond it with ENOMEM, unless the process has CAP_IPC_LOCK (ib_umem_get in
// drivers/infiniband/core/umem.c: "new_pinned > lock_limit && !capable(CAP_IPC_LOCK)"; see
// also setrlimit(2), RLIMIT_MEMLOCK, and capabilities(7), CAP_IPC_LOCK). Root usually has
// the capability; root in a container often does not, and an unprivileged daemon never does
// unless given it. Without enough, the daemon would start and then refuse every login with
// INSUFFICIENT RESOURCES, so serve checks at start-up instead.

// memlockNeed is the memory the daemon registers for the configuration's limits: the data
// buffer pool of each of devices RDMA devices, plus max_channels channels, the most one
// initiator can open. Every further initiator adds up to as much again as its channels, so
// this is what serving one initiator needs at least, not a bound.
func memlockNeed(lim *config.Limits, devices int) (need, pool, channel int64) {
	pool = poolBytes(int64(lim.BufferPoolSize), int64(lim.MaxTransferSize))
	channel = channelBytes(lim.Credits, int64(lim.MaxIUSize), srp.DefaultMaxTIIULen)
	return int64(max(devices, 1))*pool + int64(lim.MaxChannels)*channel, pool, channel
}

// poolBytes is the size of one buffer pool as srp lays it out (poolGeometry in srp/pool.go):
// a whole number of blocks of the power of two, at least 4 KiB, that holds the largest
// transfer.
func poolBytes(size, maxTransfer int64) int64 {
	const minBlock = 4096
	top := int64(minBlock)
	if maxTransfer > minBlock {
		top = minBlock << bits.Len64(uint64((maxTransfer+minBlock-1)/minBlock-1))
	}
	size = max(size, top)
	return (size + top - 1) / top * top
}

// channelBytes is the registered memory of one channel as srp sizes it (newChannel in
// srp/channel.go), at its largest: credits+1 receive buffers of max_it_iu_len, each padded so
// that immediate data starts 512-byte aligned (at most 511 bytes more) and rounded up to 512,
// and 2 x (credits+1) send buffers of the target-to-initiator IU length rounded up to 64, the
// whole in pages.
func channelBytes(credits int, maxIU int64, maxTIIU int) int64 {
	roundUp := func(n, a int64) int64 { return (n + a - 1) / a * a }
	n := int64(credits + 1)
	recv := n * roundUp(maxIU+511, 512)
	send := 2 * n * roundUp(int64(maxTIIU), 64)
	return roundUp(recv+send, int64(os.Getpagesize()))
}

// memlockState is what decides whether registrations can pin the memory: CAP_IPC_LOCK in the
// effective set, and RLIMIT_MEMLOCK (unix.RLIM_INFINITY for unlimited).
type memlockState struct {
	capIPCLock bool
	cur, max   uint64
	// raisedFrom is the soft limit before ensureMemlock raised it; 0 when it did not.
	raisedFrom uint64
}

// memlockVerdict decides whether need bytes can be pinned. With the capability or a soft
// limit high enough, nothing is to be done. A hard limit high enough means raising the soft
// limit to it (any process may, setrlimit(2)): raise is then the new soft limit. Otherwise
// err says how much is needed, what the limit is, and how to fix it.
func memlockVerdict(need, pool, channel int64, devices, channels int, s memlockState) (raise uint64, err error) {
	enough := func(limit uint64) bool { return limit == unix.RLIM_INFINITY || limit >= uint64(need) }
	switch {
	case s.capIPCLock || enough(s.cur):
		return 0, nil
	case enough(s.max):
		return s.max, nil
	}
	return 0, fmt.Errorf("locked memory: RLIMIT_MEMLOCK is %s (hard limit %s) and srptarget has no CAP_IPC_LOCK, "+
		"but it registers (pins) at least %s: a %s buffer pool for each of %d RDMA device(s) and %s for each of the %d channels (limits.max_channels) one initiator may open; "+
		"beyond the limit every login would be refused with INSUFFICIENT RESOURCES. Raise the limit (LimitMEMLOCK=infinity in the systemd unit, "+
		"or `ulimit -l unlimited` in the shell that starts srptarget) or give it the capability (AmbientCapabilities=CAP_IPC_LOCK in the unit)",
		limitString(s.cur), limitString(s.max), HumanBytes(need), HumanBytes(pool), max(devices, 1), HumanBytes(channel), channels)
}

// HumanBytes prints a byte count for people: whole KiB or MiB when it is one, else MiB with
// one decimal (1.2 MiB), or bytes below 1 KiB.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func limitString(l uint64) string {
	if l == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return HumanBytes(int64(l))
}

// readMemlockState reads the effective capabilities (capget(2)) and RLIMIT_MEMLOCK.
func readMemlockState() (memlockState, error) {
	var s memlockState
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return s, fmt.Errorf("capget: %w", err)
	}
	s.capIPCLock = data[unix.CAP_IPC_LOCK/32].Effective&(1<<(unix.CAP_IPC_LOCK%32)) != 0
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return s, fmt.Errorf("getrlimit RLIMIT_MEMLOCK: %w", err)
	}
	s.cur, s.max = rl.Cur, rl.Max
	return s, nil
}

// memlockFunc makes sure need bytes can be pinned, raising the soft RLIMIT_MEMLOCK to the
// hard one if that is enough, and returns the limits it found (after the raise). The binary
// uses ensureMemlock; tests leave it nil, since memfabric pins nothing.
type memlockFunc func(need, pool, channel int64, devices, channels int) (memlockState, error)

// ensureMemlock is the binary's memlockFunc.
func ensureMemlock(need, pool, channel int64, devices, channels int) (memlockState, error) {
	s, err := readMemlockState()
	if err != nil {
		return s, fmt.Errorf("locked memory: %w", err)
	}
	raise, err := memlockVerdict(need, pool, channel, devices, channels, s)
	if err != nil || raise == 0 {
		return s, err
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: raise, Max: s.max}); err != nil {
		return s, fmt.Errorf("locked memory: raising RLIMIT_MEMLOCK from %s to the hard limit %s: %w", limitString(s.cur), limitString(raise), err)
	}
	s.raisedFrom, s.cur = s.cur, raise
	return s, nil
}

// checkMemlock fails the start when the buffer pools and one initiator's channels could not
// be registered: better than a daemon that starts and then refuses every login. The limits
// cannot change on reload, so start-up is the one place to check.
func checkMemlock(memlock memlockFunc, devicesOf DevicesFunc, cfg *config.Config, log *zap.Logger) error {
	if memlock == nil {
		return nil
	}
	devices := 1
	if devicesOf != nil {
		if devs, err := devicesOf(); err == nil && len(devs) > 0 {
			devices = len(devs)
		}
	}
	need, pool, channel := memlockNeed(&cfg.Limits, devices)
	s, err := memlock(need, pool, channel, devices, cfg.Limits.MaxChannels)
	if err != nil {
		return err
	}
	if s.raisedFrom != 0 {
		log.Info("raised the soft RLIMIT_MEMLOCK to the hard limit, for the memory registered for RDMA",
			zap.String("from", limitString(s.raisedFrom)), zap.String("to", limitString(s.cur)), zap.String("needed", HumanBytes(need)))
	}
	log.Debug("locked memory", zap.String("needed", HumanBytes(need)), zap.Int("devices", devices),
		zap.Bool("cap_ipc_lock", s.capIPCLock), zap.String("rlimit_memlock", limitString(s.cur)))
	return nil
}
