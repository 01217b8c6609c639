package srp

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/srptarget/srptarget/backstore"
)

// TestGroupIORegisteredPool: the group's ring registers the pool of the first channel that
// starts a request, keeps it while it is open (a channel of another device's pool pins its
// buffers per request), and lets it go at the next start once that pool is closing (its
// device removed), before the request: then the next channel's pool is registered.
func TestGroupIORegisteredPool(t *testing.T) {
	q, err := backstore.NewQueue(4, false)
	if errors.Is(err, backstore.ErrAsyncUnsupported) {
		t.Skipf("io_uring does not work here: %v", err)
	}
	require.NoError(t, err)
	defer q.Close()
	io := &groupIO{g: &pollGroup{log: zaptest.NewLogger(t)}, q: q}
	pool := func() *bufPool {
		p, err := newBufPoolMem(1<<20, 64<<10)
		require.NoError(t, err)
		return p
	}
	a, b := pool(), pool()
	io.bufs.register(io.q, a, io.g.log)
	require.Same(t, a, io.bufs.pool)
	io.bufs.register(io.q, b, io.g.log)
	require.Same(t, a, io.bufs.pool, "another open pool is not registered instead")
	require.NoError(t, a.close())
	io.bufs.register(io.q, b, io.g.log)
	require.Same(t, b, io.bufs.pool, "the closing pool was let go and the next one registered")
	require.False(t, io.bufs.failed)
}
