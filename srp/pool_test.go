package srp

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
)

func TestPoolSizing(t *testing.T) {
	cases := []struct {
		size     int64
		maxBuf   uint32
		wantSize int64
		maxOrder int
	}{
		{size: 64 << 20, maxBuf: 8 << 20, wantSize: 64 << 20, maxOrder: 11},
		{size: 20 << 20, maxBuf: 8 << 20, wantSize: 24 << 20, maxOrder: 11}, // rounded up to 8 MiB blocks
		{size: 1 << 20, maxBuf: 8 << 20, wantSize: 8 << 20, maxOrder: 11},   // at least one largest block
		{size: 1 << 20, maxBuf: 5000, wantSize: 1 << 20, maxOrder: 1},       // 8 KiB largest block
		{size: 4096, maxBuf: 100, wantSize: 4096, maxOrder: 0},
	}
	for _, tc := range cases {
		p, err := newBufPoolMem(tc.size, tc.maxBuf)
		require.NoError(t, err)
		require.Equal(t, tc.wantSize, p.size())
		require.Equal(t, tc.maxOrder, p.blocks.maxOrder)
		require.Equal(t, tc.wantSize, p.freeBytes())
	}
}

func TestPoolOrderFor(t *testing.T) {
	p, err := newBufPoolMem(8<<20, 8<<20)
	require.NoError(t, err)
	for _, tc := range []struct {
		n     uint32
		order int
	}{
		{1, 0}, {4096, 0}, {4097, 1}, {8192, 1}, {8193, 2}, {65536, 4}, {8 << 20, 11}, {8<<20 + 1, -1},
	} {
		require.Equal(t, tc.order, p.orderFor(tc.n), "%d bytes", tc.n)
	}
}

// TestPoolBuddy checks exact placement: blocks split from the lowest address, buddies merge
// back into the block they came from.
func TestPoolBuddy(t *testing.T) {
	p, err := newBufPoolMem(64<<10, 32<<10) // two 32 KiB top blocks (order 3)
	require.NoError(t, err)
	a, ok := p.alloc(4096)
	require.True(t, ok)
	b, ok := p.alloc(4096)
	require.True(t, ok)
	c, ok := p.alloc(8192)
	require.True(t, ok)
	d, ok := p.alloc(16384)
	require.True(t, ok)
	// a, b: units 0 and 1 of the first top block; c: units 2-3; d: units 4-7.
	require.Equal(t, []uint64{0, 4096, 8192, 16384}, []uint64{a.offset(), b.offset(), c.offset(), d.offset()})
	e, ok := p.alloc(32 << 10)
	require.True(t, ok)
	require.Equal(t, uint64(32<<10), e.offset())
	_, ok = p.alloc(1)
	require.False(t, ok, "pool is full")
	require.Equal(t, int64(64<<10), p.inUse.Load())

	p.release(b)
	p.release(a) // a and b merge into units 0-1, and no further (2-3 busy)
	f, ok := p.alloc(8192)
	require.True(t, ok)
	require.Equal(t, uint64(0), f.offset())
	p.release(f)
	p.release(c)
	p.release(d)
	p.release(e)
	require.Equal(t, p.size(), p.freeBytes())
	require.Zero(t, p.inUse.Load())
	require.Equal(t, int64(64<<10), p.highMark.Load())
	// Everything merged back: a whole top block is available again, twice.
	g, ok := p.alloc(32 << 10)
	require.True(t, ok)
	h, ok := p.alloc(32 << 10)
	require.True(t, ok)
	require.NotEqual(t, g.offset(), h.offset())
	require.Len(t, p.bytes(g), 32<<10)
	require.Equal(t, 32<<10, cap(p.bytes(g)), "a buffer must not reach into the next one")
}

// TestPoolRandom allocates and frees at random, checking that live buffers never overlap and
// that everything merges back.
func TestPoolRandom(t *testing.T) {
	p, err := newBufPoolMem(4<<20, 1<<20)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	var live []poolBuf
	owner := make([]int, p.size()/poolMinBlock)
	for i := range owner {
		owner[i] = -1
	}
	for step := 0; step < 20000; step++ {
		if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 64) {
			i := rng.IntN(len(live))
			b := live[i]
			for u := b.unit; u < b.unit+int32(1)<<b.order; u++ {
				owner[u] = -1
			}
			p.release(b)
			live = append(live[:i], live[i+1:]...)
			continue
		}
		n := uint32(1 + rng.IntN(1<<20))
		b, ok := p.alloc(n)
		if !ok {
			continue
		}
		require.Zero(t, b.unit%(int32(1)<<b.order), "block not aligned to its size")
		require.GreaterOrEqual(t, int64(poolMinBlock)<<b.order, int64(n))
		for u := b.unit; u < b.unit+int32(1)<<b.order; u++ {
			require.Equal(t, -1, owner[u], "unit %d handed out twice", u)
			owner[u] = step
		}
		live = append(live, b)
	}
	for _, b := range live {
		p.release(b)
	}
	require.Equal(t, p.size(), p.freeBytes())
	require.Zero(t, p.inUse.Load())
	b, ok := p.alloc(1 << 20)
	require.True(t, ok, "fragmentation left: the pool did not merge back")
	p.release(b)
}

func TestPoolWakesWaiters(t *testing.T) {
	p, err := newBufPoolMem(4096, 4096)
	require.NoError(t, err)
	w := make(wakeChan, 1)
	p.register(w)
	b, ok := p.alloc(4096)
	require.True(t, ok)
	p.release(b)
	require.Len(t, w, 0, "nobody waits: no wake-up")
	b, _ = p.alloc(4096)
	p.waiting.Add(1)
	p.release(b)
	require.Len(t, w, 1)
	p.unregister(w)
	<-w
	b, _ = p.alloc(4096)
	p.release(b)
	require.Len(t, w, 0)
}

func TestPoolNoAllocations(t *testing.T) {
	p, err := newBufPoolMem(8<<20, 1<<20)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		a, _ := p.alloc(4096)
		b, _ := p.alloc(1 << 20)
		p.release(a)
		p.release(b)
	})
	require.Zero(t, allocs)
}

// TestPoolRegistrationAccess: the pool is an RDMA READ sink, so local write always; remote
// write only when asked for (iWARP), never remote read.
func TestPoolRegistrationAccess(t *testing.T) {
	fab := memfabric.New(memfabric.Options{})
	defer func() { require.NoError(t, fab.Close()) }()
	node, err := fab.NewNode(netip.MustParseAddr("192.0.2.7"))
	require.NoError(t, err)
	for _, tc := range []struct {
		remoteWrite bool
		want        ib.Access
	}{
		{false, ib.AccessLocalWrite},
		{true, ib.AccessLocalWrite | ib.AccessRemoteWrite},
	} {
		p, err := newBufPool(node.PD(), 1<<20, 64<<10, tc.remoteWrite)
		require.NoError(t, err)
		require.Equal(t, tc.want, p.mr.Access(), "remote write %v", tc.remoteWrite)
		require.Equal(t, len(p.mem), p.mr.Len())
		require.NoError(t, p.close())
	}
}
