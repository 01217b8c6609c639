package srp

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
)

// removablePD is a protection domain whose device can be removed (ib.RemovalNotifier).
type removablePD struct {
	ib.ProtectionDomain
	gone chan struct{}
}

func (p *removablePD) Removed() <-chan struct{} { return p.gone }

// newRemovablePool starts a target and gets its buffer pool for a removable device of a node
// at addr on a fabric of its own.
func newRemovablePool(t *testing.T, addr string) (*Target, *removablePD, *bufPool) {
	t.Helper()
	fab := memfabric.New(memfabric.Options{})
	t.Cleanup(func() { _ = fab.Close() })
	node, err := fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(t, err)
	tgt, err := New(Config{Limits: Limits{BufferPoolSize: 1 << 20, MaxTransferLen: 64 << 10}})
	require.NoError(t, err)
	pd := &removablePD{ProtectionDomain: node.PD(), gone: make(chan struct{})}
	p, err := tgt.pools.get(pd)
	require.NoError(t, err)
	return tgt, pd, p
}

// poolClosed reports whether p has been unmapped.
func poolClosed(p *bufPool) bool {
	select {
	case <-p.closing:
		return true
	default:
		return false
	}
}

func shutdownTarget(t *testing.T, tgt *Target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, tgt.Shutdown(ctx))
}

// TestRetirePoolOfRemovedDevice: when a device goes, its buffer pool leaves the target at once
// (a device added again gets a new one) and is unmapped once its channels are gone and its
// buffers are back, not before.
func TestRetirePoolOfRemovedDevice(t *testing.T) {
	tgt, pd, p := newRemovablePool(t, "192.0.2.9")
	same, err := tgt.pools.get(pd)
	require.NoError(t, err)
	require.Same(t, p, same)

	// A channel still registered and a buffer still out.
	wake := make(wakeChan, 1)
	p.register(wake)
	buf, ok := p.alloc(4096)
	require.True(t, ok)

	close(pd.gone)
	require.Eventually(t, func() bool {
		tgt.pools.mu.Lock()
		defer tgt.pools.mu.Unlock()
		return tgt.pools.pools[pd] == nil
	}, 5*time.Second, time.Millisecond, "the removed device's pool leaves the target")
	require.Never(t, func() bool { return poolClosed(p) }, 300*time.Millisecond, 10*time.Millisecond, "not unmapped while a buffer is out and a channel uses it")

	p.release(buf)
	p.unregister(wake)
	require.Eventually(t, func() bool { return poolClosed(p) }, 5*time.Second, time.Millisecond, "unmapped once unused")
	require.NoError(t, p.close(), "closing again is harmless")
	shutdownTarget(t, tgt)
}

// TestShutdownClosesRemovablePools: a pool whose device is still there is closed by Shutdown,
// and its watcher ends.
func TestShutdownClosesRemovablePools(t *testing.T) {
	tgt, _, p := newRemovablePool(t, "192.0.2.10")
	shutdownTarget(t, tgt)
	require.True(t, poolClosed(p), "Shutdown did not close the pool")
}

// TestBufPoolMemoryOutsideHeap: a pool's memory is a slab, not a Go allocation that the
// slab then replaces: such a transient heap allocation of the pool's size stayed resident
// after the pool closed (zeroed on reuse), so a device removed and added back under the
// stress test held two pools' worth of memory.
func TestBufPoolMemoryOutsideHeap(t *testing.T) {
	fab := memfabric.New(memfabric.Options{})
	t.Cleanup(func() { _ = fab.Close() })
	node, err := fab.NewNode(netip.MustParseAddr("192.0.2.10"))
	require.NoError(t, err)
	const size = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p, err := newBufPool(node.PD(), size, 8<<20, false)
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	t.Cleanup(func() { require.NoError(t, p.close()) })
	require.Len(t, p.mem, size)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(size/8),
		"Go heap bytes allocated for a pool of %d bytes", size)
}

// wakeChan is a pool waker for tests: a wake-up is a value in the channel.
type wakeChan chan struct{}

func (w wakeChan) signal() {
	select {
	case w <- struct{}{}:
	default:
	}
}
