package memfabric

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/srptarget/srptarget/ib"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	targetPort = 5555
	waitLimit  = 5 * time.Second
)

var (
	targetAddr    = netip.MustParseAddr("192.0.2.1")
	initiatorAddr = netip.MustParseAddr("192.0.2.2")
	modes         = []struct {
		name  string
		async bool
	}{{"sync", false}, {"async", true}}
)

// env is a fabric with a target node listening on targetPort and an initiator node.
type env struct {
	f                 *Fabric
	target, initiator *Node
	ln                ib.Listener
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	f := New(opts)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return envOn(t, f)
}

// envOn is the two nodes and the target's listener on f, which the caller closes.
func envOn(t testing.TB, f *Fabric) *env {
	t.Helper()
	tn, err := f.NewNode(targetAddr)
	require.NoError(t, err)
	in, err := f.NewNode(initiatorAddr)
	require.NoError(t, err)
	ln, err := tn.Listen(targetPort)
	require.NoError(t, err)
	return &env{f: f, target: tn, initiator: in, ln: ln}
}

func caps() ib.QPCaps {
	return ib.QPCaps{SendQueueDepth: 16, RecvQueueDepth: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
}

// srpAccept are the parameters an SRP target uses (LIO): RNR retry 7, depth 4/4.
func srpAccept() ib.AcceptParams {
	return ib.AcceptParams{PrivateData: []byte("login-rsp"), QP: caps(), RNRRetryCount: 7, ResponderResources: 4, InitiatorDepth: 4}
}

// srpConnect are the parameters ib_srp uses: RNR retry 7, responder resources 4, depth 0.
func srpConnect() ConnectParams {
	return ConnectParams{QP: caps(), RNRRetryCount: 7, ResponderResources: 4}
}

type dialResult struct {
	c   *Conn
	err error
}

// dialAsync starts Connect on a goroutine (Connect blocks until the target answers).
func (e *env) dialAsync(ctx context.Context, priv []byte, cp ConnectParams) <-chan dialResult {
	ch := make(chan dialResult, 1)
	go func() {
		c, err := e.initiator.Connect(ctx, e.ln.Addr(), priv, cp)
		ch <- dialResult{c, err}
	}()
	return ch
}

func (e *env) next(t testing.TB) ib.ConnRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	req, err := e.ln.Next(ctx)
	require.NoError(t, err)
	return req
}

// connect establishes a connection and consumes both EventEstablished.
func (e *env) connect(t testing.TB, cp ConnectParams, ap ib.AcceptParams) (ib.Conn, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ch := e.dialAsync(ctx, []byte("login-req"), cp)
	tc, err := e.next(t).Accept(ap)
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	if !e.f.opts.DelayEstablished {
		requireEvent(t, tc, ib.EventEstablished)
	}
	requireEvent(t, r.c, ib.EventEstablished)
	return tc, r.c
}

func register(t testing.TB, pd ib.ProtectionDomain, size int, acc ib.Access) ib.MR {
	t.Helper()
	mr, err := pd.RegisterMemory(make([]byte, size), acc)
	require.NoError(t, err)
	return mr
}

// poll waits for exactly n completions, using Ready the way the engine does.
func poll(t testing.TB, c ib.Conn, n int) []ib.Completion {
	t.Helper()
	var out []ib.Completion
	wcs := make([]ib.Completion, 3) // small on purpose: exercises partial drains
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for len(out) < n {
		k, err := c.PollCompletions(wcs[:min(len(wcs), n-len(out))])
		require.NoError(t, err)
		out = append(out, wcs[:k]...)
		if k == 0 {
			select {
			case <-c.Ready():
			case <-deadline.C:
				require.FailNow(t, "timeout", "got %d of %d completions: %+v", len(out), n, out)
			}
		}
	}
	return out
}

func requireNoCompletions(t testing.TB, c ib.Conn) {
	t.Helper()
	var wcs [4]ib.Completion
	n, err := c.PollCompletions(wcs[:])
	require.NoError(t, err)
	require.Zero(t, n, "unexpected completions %+v", wcs[:n])
}

func requireEvent(t testing.TB, c ib.Conn, want ib.Event) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		if ev, ok := c.PollEvent(); ok {
			require.Equal(t, want, ev)
			return
		}
		select {
		case <-c.Ready():
		case <-deadline.C:
			require.FailNow(t, "timeout", "waiting for %v", want)
		}
	}
}

func requireNoEvent(t testing.TB, c ib.Conn) {
	t.Helper()
	ev, ok := c.PollEvent()
	require.False(t, ok, "unexpected event %v", ev)
}

func recvs(mr ib.MR, ids []uint64, size uint32) []ib.RecvWR {
	wrs := make([]ib.RecvWR, len(ids))
	for i, id := range ids {
		wrs[i] = ib.RecvWR{ID: id, SGL: []ib.SGE{{MR: mr, Offset: uint64(i) * uint64(size), Length: size}}}
	}
	return wrs
}

func sortedIDs(wcs []ib.Completion) []uint64 {
	ids := make([]uint64, len(wcs))
	for i, wc := range wcs {
		ids[i] = wc.ID
	}
	slices.Sort(ids)
	return ids
}
