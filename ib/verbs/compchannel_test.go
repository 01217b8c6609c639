//go:build linux && cgo

package verbs

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// chanEnd is a completion channel with one shared CQ on it and a connection whose target side
// receives into that CQ.
type chanEnd struct {
	name string
	ch   ib.CompChannel
	cq   ib.CQ
	p    *ibtest.Pair
	ini  ib.MR
}

// openChanEnd makes a chanEnd on the target device of f; its connection, CQ and channel close
// at the end of the test, or in closeChanEnd.
func openChanEnd(t *testing.T, f suiteFabric, sq ib.SharedQueues) *chanEnd {
	t.Helper()
	ch, err := sq.NewCompChannel()
	require.NoError(t, err)
	return chanEndOn(t, f, sq, ch)
}

func chanEndOn(t *testing.T, f suiteFabric, sq ib.SharedQueues, ch ib.CompChannel) *chanEnd {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, ch.Close()) })
	cq, err := sq.NewCQ(ch, 64, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cq.Close()) })
	e := &chanEnd{ch: ch, cq: cq}
	e.p = f.ConnectShared(t, ibtest.Caps, func(ap *ib.AcceptParams) { ap.CQ = cq })
	_, tmr := register(t, e.p.TPD)
	_, e.ini = register(t, e.p.IPD)
	recvs := make([]ib.RecvWR, 4)
	for i := range recvs {
		recvs[i] = ib.RecvWR{ID: uint64(100 + i), SGL: []ib.SGE{{MR: tmr, Offset: uint64(i * bufSize), Length: bufSize}}}
	}
	_, err = e.p.T.PostRecv(recvs)
	require.NoError(t, err)
	return e
}

// closeChanEnd closes e's connection, CQ and channel now.
func closeChanEnd(t *testing.T, e *chanEnd) {
	t.Helper()
	require.NoError(t, e.p.T.Close())
	require.NoError(t, e.p.I.Close())
	require.NoError(t, e.cq.Close())
	require.NoError(t, e.ch.Close())
}

// send arms e's CQ and sends it one message, whose receive raises an event on e's channel.
func (e *chanEnd) send(t *testing.T) {
	t.Helper()
	require.NoError(t, e.cq.Arm())
	_, err := e.p.I.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: e.ini, Length: 8}}}})
	require.NoError(t, err)
	require.Equal(t, []ib.Completion{ibtest.OK(1, ib.OpSend)}, ibtest.Poll(t, e.p.I, 1))
}

// take polls e's CQ for the receive that send caused.
func (e *chanEnd) take(t *testing.T) {
	t.Helper()
	wcs := make([]ib.Completion, 4)
	n, err := e.cq.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n, "completions %+v", wcs[:n])
	require.Equal(t, ib.StatusSuccess, wcs[0].Status)
}

// serveAlso serves ch with also until the step has been handed n events, or for d, and
// returns the CQs of the events handed before d was over. start, if not nil, runs in the
// step's first call, before Serve parks: the event it causes must wake the Serve (the
// Interrupt at d makes the step read every channel again, which would take it anyway).
func serveAlso(t *testing.T, ch ib.CompChannel, also []ib.CompChannel, d time.Duration, n int, start func()) []ib.CQ {
	t.Helper()
	var over atomic.Bool
	tm := time.AfterFunc(d, func() { over.Store(true); ch.Interrupt() })
	defer tm.Stop()
	var got []ib.CQ
	require.NoError(t, ch.Serve(also, func(fired []ib.CQ) bool {
		if start != nil {
			start()
			start = nil
		}
		if over.Load() {
			return true
		}
		got = append(got, fired...)
		return len(got) >= n
	}))
	return got
}

// TestCompChannelServeAlso: a Serve of several channels waits on an epoll set of their
// descriptors. Channels of one device stand in for several devices' (the VM has one). The
// events of the channel served and of also reach the step; a channel left out of a later
// Serve's also is no longer waited for, and its event stays for its own Serve; a channel
// whose descriptor number is that of a closed member of the set is waited for all the same.
func TestCompChannelServeAlso(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		f := suiteFabric{addr: a}
		sq := f.TargetQueues(t)
		var ends []*chanEnd
		named := func(name string, e *chanEnd) *chanEnd {
			e.name = name
			ends = append(ends, e)
			return e
		}
		// names names the CQs of events by their ends, for messages that can be read.
		names := func(got []ib.CQ) []string {
			out := []string{}
			for _, q := range got {
				n := "a CQ of no end"
				for _, e := range ends {
					if e.cq == q {
						n = e.name
					}
				}
				out = append(out, n)
			}
			return out
		}
		served, one := named("served", openChanEnd(t, f, sq)), named("one", openChanEnd(t, f, sq))

		require.Equal(t, []string{"one"},
			names(serveAlso(t, served.ch, []ib.CompChannel{one.ch}, waitLimit, 1, func() { one.send(t) })),
			"the event of the channel in also")
		one.take(t)
		require.Equal(t, []string{"served"},
			names(serveAlso(t, served.ch, []ib.CompChannel{one.ch}, waitLimit, 1, func() { served.send(t) })),
			"the event of the channel served")
		served.take(t)

		// Another channel in also instead of one: one's event is not taken, and stays for one.
		other := named("other", openChanEnd(t, f, sq))
		one.send(t)
		require.Equal(t, []string{"other"},
			names(serveAlso(t, served.ch, []ib.CompChannel{other.ch}, waitLimit, 1, func() { other.send(t) })))
		other.take(t)
		require.Empty(t, names(serveAlso(t, served.ch, []ib.CompChannel{other.ch}, 300*time.Millisecond, 1, nil)),
			"one's event, which one is no longer in also")
		require.Equal(t, []string{"one"}, names(serveAlso(t, one.ch, nil, waitLimit, 1, nil)), "one's event, for one")
		one.take(t)

		// other closes while it is still in the set, and the next channel gets its descriptor
		// number: the kernel hands out the lowest free one, and every lower one is held first.
		fd := int(other.ch.(*compChannel).ch.fd)
		closeChanEnd(t, other)
		var held []int
		for {
			n, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			require.NoError(t, err)
			if n >= fd {
				require.NoError(t, unix.Close(n))
				require.Equal(t, fd, n, "descriptor %d is not free after the channel closed", fd)
				break
			}
			held = append(held, n)
		}
		reused, err := sq.NewCompChannel()
		for _, n := range held {
			require.NoError(t, unix.Close(n))
		}
		require.NoError(t, err)
		require.Equal(t, fd, int(reused.(*compChannel).ch.fd))
		again := named("again", chanEndOn(t, f, sq, reused))
		require.Equal(t, []string{"again"},
			names(serveAlso(t, served.ch, []ib.CompChannel{again.ch}, waitLimit, 1, func() { again.send(t) })),
			"the event of a channel with a closed member's descriptor number")
		again.take(t)
	})
}
