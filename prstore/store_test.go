package prstore

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/srptarget/srptarget/internal/testutil"
)

// testCache is a Cache that records what the store did to it.
type testCache struct {
	mu      sync.Mutex
	data    []byte
	version uint64
	fresh   bool
	stale   []time.Time // when it was marked stale
	applied chan uint64
}

func newTestCache() *testCache { return &testCache{applied: make(chan uint64, 64)} }

func (c *testCache) Apply(data []byte, v uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v > c.version {
		c.data, c.version = data, v
		c.applied <- v
	}
	return nil
}

func (c *testCache) SetFresh(fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh && !fresh {
		c.stale = append(c.stale, time.Now())
	}
	c.fresh = fresh
}

func (c *testCache) Version() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

func (c *testCache) isFresh() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fresh
}

func (c *testCache) lastStale() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stale) == 0 {
		return time.Time{}
	}
	return c.stale[len(c.stale)-1]
}

// The tests' lease and drain: short, so that waiting them out is quick, and long against a
// loaded machine's scheduling delays, which the store's safety bounds (stale within the lease,
// acknowledged within half of it) must absorb like any other delay.
const (
	testLease = time.Second
	testDrain = 500 * time.Millisecond
)

type gateway struct {
	client *fakeClient
	store  *Store
	cache  *testCache
}

// newGateway opens a store for member name on cl and waits until its cache is fresh.
func newGateway(t *testing.T, cl *fakeCluster, name string, gid uint64) *gateway {
	t.Helper()
	g := &gateway{client: cl.client(gid), cache: newTestCache()}
	var err error
	g.store, err = Open(g.client, Options{Member: name, Lease: testLease, Drain: testDrain, Log: zaptest.NewLogger(t)})
	require.NoError(t, err)
	g.store.Attach(g.cache)
	t.Cleanup(func() { g.client.cut.Store(false); _ = g.store.Close() })
	testutil.WaitFor(t, name+" fresh", g.cache.isFresh)
	return g
}

// commit stores data through g as the version after from, and checks that it won.
func (g *gateway) commit(t *testing.T, from uint64, data string) {
	t.Helper()
	ok, err := g.store.Commit(from, []byte(data))
	require.NoError(t, err)
	require.True(t, ok)
}

// publishAcked publishes version v through g and checks that it returned within half a lease:
// every member acknowledged, none was waited out.
func (g *gateway) publishAcked(t *testing.T, v uint64, msgAndArgs ...any) {
	t.Helper()
	start := time.Now()
	require.NoError(t, g.store.Publish(v))
	require.Less(t, time.Since(start), testLease/2, msgAndArgs...)
}

// TestPublishAcknowledged: a change stored through one gateway is applied by the other before
// Publish returns, within a notify's round trip; a second commit from the old version loses.
func TestPublishAcknowledged(t *testing.T) {
	cl := newFakeCluster()
	a, b := newGateway(t, cl, "a", 1), newGateway(t, cl, "b", 2)
	a.commit(t, 0, "one")
	a.publishAcked(t, 1, "acknowledged, not waited out")
	require.Equal(t, uint64(1), b.cache.Version())
	require.Equal(t, "one", string(b.cache.data))

	ok, err := b.store.Commit(0, []byte("other"))
	require.NoError(t, err)
	require.False(t, ok, "version 0 is no longer current")
	data, v, err := b.store.Load()
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	require.Equal(t, "one", string(data))
}

// TestAnnounce: Announce returns at once, even with a gateway cut off; a gateway that hears
// the notification applies the version, and the cut one is not evicted (it learns of the
// version from its renewals once it reaches the cluster again).
func TestAnnounce(t *testing.T) {
	cl := newFakeCluster()
	a, b, c := newGateway(t, cl, "a", 1), newGateway(t, cl, "b", 2), newGateway(t, cl, "c", 3)
	c.client.cut.Store(true)
	a.commit(t, 0, "one")
	start := time.Now()
	a.store.Announce(1)
	require.Less(t, time.Since(start), testLease/4, "not waited for")
	testutil.WaitFor(t, "b applied version 1", func() bool { return b.cache.Version() == 1 })
	c.client.cut.Store(false)
	testutil.WaitFor(t, "c caught up by its renewals", func() bool { return c.cache.Version() == 1 && c.cache.isFresh() })
	ms, _, err := a.store.members()
	require.NoError(t, err)
	require.Contains(t, ms, "c", "not evicted")
}

// TestPublishWaitsOutACutGateway: a gateway cut off from the cluster does not acknowledge;
// the change's Publish returns only after that gateway's lease and drain, and the cut gateway
// had marked its cache stale before (within its lease). It is evicted, and once it reaches the
// cluster again it registers anew, catches up and is fresh.
func TestPublishWaitsOutACutGateway(t *testing.T) {
	cl := newFakeCluster()
	a, b := newGateway(t, cl, "a", 1), newGateway(t, cl, "b", 2)
	b.client.cut.Store(true)
	cutAt := time.Now()
	a.commit(t, 0, "one")
	start := time.Now()
	require.NoError(t, a.store.Publish(1))
	done := time.Now()
	require.GreaterOrEqual(t, done.Sub(start), testLease+testDrain, "waited out b's lease and drain")
	stale := b.cache.lastStale()
	require.False(t, stale.IsZero(), "b marked itself stale")
	require.True(t, stale.Before(done.Add(-testDrain)), "b was stale %v before the change completed, the drain before", done.Sub(stale))
	require.Less(t, stale.Sub(cutAt), testLease, "b was stale within its lease of being cut")
	require.Equal(t, uint64(0), b.cache.Version())
	_, err := a.client.ReadOmap([]string{keyMemberPrefix + "b"}, nil)
	require.NoError(t, err)
	vals, _ := a.client.ReadOmap([]string{keyMemberPrefix + "b"}, nil)
	require.Empty(t, vals, "b evicted")

	// The next change does not wait for b.
	a.commit(t, 1, "two")
	a.publishAcked(t, 2)

	b.client.cut.Store(false)
	testutil.WaitFor(t, "b fresh again", b.cache.isFresh)
	require.Equal(t, uint64(2), b.cache.Version())
	require.Equal(t, "two", string(b.cache.data))
	vals, _ = a.client.ReadOmap([]string{keyMemberPrefix + "b"}, nil)
	require.NotEmpty(t, vals, "b registered again")
	a.commit(t, 2, "three")
	a.publishAcked(t, 3, "b acknowledges again")
	require.Equal(t, uint64(3), b.cache.Version())
}

// TestWatchLostPolling: a gateway whose watch is gone (it hears no notify) still learns of a
// change by its renewals, within a quarter of its lease; the change's Publish waits it out.
func TestWatchLostPolling(t *testing.T) {
	cl := newFakeCluster()
	a, b := newGateway(t, cl, "a", 1), newGateway(t, cl, "b", 2)
	b.store.mu.Lock()
	require.NoError(t, b.store.watch.Close())
	b.store.mu.Unlock()
	a.commit(t, 0, "one")
	stored := time.Now()
	published := make(chan time.Duration, 1)
	go func() { _ = a.store.Publish(1); published <- time.Since(stored) }()
	select {
	case <-b.cache.applied:
		require.Less(t, time.Since(stored), testLease/4+testLease/4, "applied by a renewal")
	case <-time.After(testLease):
		t.Fatal("b did not learn of the change")
	}
	require.GreaterOrEqual(t, <-published, testLease+testDrain, "no acknowledgement: waited out")
}

// TestClose: a closed store's member key is gone and its cache stale.
func TestClose(t *testing.T) {
	cl := newFakeCluster()
	a := newGateway(t, cl, "a", 1)
	require.NoError(t, a.store.Close())
	require.False(t, a.cache.isFresh())
	vals, err := a.client.ListOmap(keyMemberPrefix, 10)
	require.NoError(t, err)
	require.Empty(t, vals)
}

// TestParseAck checks the acknowledgement payload both ways.
func TestParseAck(t *testing.T) {
	name, v, ok := parseAck(ackPayload("0x0002c90300a0b0c1 port", 42))
	require.True(t, ok)
	require.Equal(t, "0x0002c90300a0b0c1 port", name)
	require.Equal(t, uint64(42), v)
	_, _, ok = parseAck([]byte("noversion"))
	require.False(t, ok)
}
