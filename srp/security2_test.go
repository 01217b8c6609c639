package srp_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// Attacks of the second security review: one initiator with several channels, trickling
// receive buffers so that every channel looks alive; one host filling the target's global
// caps with forged initiator port ids; channels that hold nothing and never go away.

// newRawChannels logs n raw channels of one nexus in from one node (MULTI-CHANNEL ACTION
// multi after the first), none with a receive buffer posted.
func newRawChannels(t *testing.T, h *harness, addr string, n int) []*rawConn {
	node, err := h.fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(t, err)
	cfg := h.cfg()
	cfg.InitiatorPortID[0], cfg.InitiatorPortID[15] = 0xa7, 0x01
	cfg.MultiChannel = iu.MultiChanMulti
	rs := make([]*rawConn, n)
	for i := range rs {
		rs[i] = newRawConnNode(t, h, node, 0, cfg)
	}
	return rs
}

// TestSec2TricklingInitiatorCannotStarveOthers: an initiator with 4 channels posts no
// receive buffers and sends 8 MiB READs on each, then posts one receive per channel every
// 500 ms, sending a new READ for every response, so that one response per channel completes
// every 500 ms and every channel keeps making "progress". It may hold no more than its share
// of the pool whatever its channel count: the victim's 4 KiB READs complete GOOD within a
// second, throughout. The watchdog judges the age of the oldest outstanding work request,
// not whether anything completed: the attacker's channels are closed within twice
// rdma_timeout of the attack's start (rdma_timeout, a quarter more between the watchdog's
// looks, and room for a loaded machine), long before the attack's 4 rdma_timeouts end.
func TestSec2TricklingInitiatorCannotStarveOthers(t *testing.T) {
	const timeout = 2 * time.Second
	h := newHarness(t, harnessOpts{limits: srp.Limits{BufferPoolSize: 32 << 20, RDMATimeout: timeout,
		BufferWait: 200 * time.Millisecond}})
	victim := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.13.2")})
	clearUA(t, victim, 0)

	attackers := newRawChannels(t, h, "198.19.13.1", 4)
	mem := make([]byte, 8<<20)
	mr, err := attackers[0].pd.RegisterMemory(mem, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	require.NoError(t, err)
	defer func() { _ = mr.Deregister() }()
	var tag iu.Tag
	read := func(a *rawConn) {
		tag++
		a.send(stuckRead(tag, mr, len(mem)/testBlockSize))
	}
	start := time.Now()
	for _, a := range attackers {
		for range 16 {
			read(a)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the trickle, and a new READ for every response
		defer wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, a := range attackers {
				for range a.trickle() {
					read(a)
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// The victim, for four rdma_timeouts: every READ GOOD within a second.
	for time.Since(start) < 4*timeout {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rsp, err := victim.Read10(ctx, 0, 0, 8, testBlockSize)
		cancel()
		require.NoError(t, err)
		require.True(t, rsp.Good(), "victim's READ at %v: status %#x", time.Since(start).Round(time.Millisecond), rsp.Status)
		require.Less(t, time.Since(t0), time.Second, "victim's READ at %v took too long", time.Since(start).Round(time.Millisecond))
		require.LessOrEqual(t, h.tgt.Stats().PoolInUse, int64(8<<20)+int64(64<<10), "the attacker holds more than its share")
		time.Sleep(100 * time.Millisecond)
	}
	st := h.tgt.Stats()
	require.Equal(t, uint64(4), st.RDMAStalls, "the trickling channels were not closed as stalled")
	require.Equal(t, int64(1), st.ChannelsOpen, "only the victim's channel is left")
	var closed int
	for _, e := range h.logs.FilterMessage("closing channel").All() {
		if src, _ := e.ContextMap()["src"].(string); strings.HasPrefix(src, "198.19.13.1:") {
			closed++
			// The watchdog closes a channel rdma_timeout after its last progress, looking every
			// rdma_timeout/4; the rest is room for a loaded machine. Without the watchdog the
			// attackers would hold their channels for as long as they trickle.
			require.LessOrEqual(t, e.Time.Sub(start), 2*timeout, "an attacker's channel closed late: %v", e.ContextMap()["reason"])
		}
	}
	require.Equal(t, 4, closed)
}

// trickle posts one receive buffer and returns the number of IUs that arrived, as the
// trickling attacker does.
func (r *rawConn) trickle() int {
	slot := r.nextRx % (len(r.rx) / rawSlot)
	r.nextRx++
	wr := ib.RecvWR{ID: uint64(slot), SGL: []ib.SGE{{MR: r.rxMR, Offset: uint64(slot * rawSlot), Length: rawSlot}}}
	if _, err := r.conn.PostRecv([]ib.RecvWR{wr}); err != nil {
		return 0 // the target closed the channel
	}
	wcs := make([]ib.Completion, 16)
	got := 0
	for {
		n, err := r.conn.PollCompletions(wcs)
		for _, wc := range wcs[:n] {
			if wc.Opcode == ib.OpRecv && wc.Status == ib.StatusSuccess {
				got++
			}
		}
		if err != nil || n < len(wcs) {
			return got
		}
	}
}

// TestSec2OneHostCannotTakeEverySession: a host fills the target with forged initiator port
// ids, one idle channel each, as many as it is let. A legitimate initiator from another
// address still logs in and works, and the host's refusals say which limit refused it.
func TestSec2OneHostCannotTakeEverySession(t *testing.T) {
	const maxSessions, maxChannels = 8, 12
	h := newHarness(t, harnessOpts{limits: srp.Limits{MaxSessions: maxSessions, MaxChannelsTotal: maxChannels}})
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.14.1"))
	require.NoError(t, err)
	var accepted int
	var refusal *srptest.LoginRejectedError
	for i := range maxChannels {
		cfg := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Node: node, QueueDepth: 4}
		cfg.InitiatorPortID[0], cfg.InitiatorPortID[15] = 0xfd, byte(i)
		ch, err := h.loginErr(cfg)
		if err != nil {
			require.True(t, errors.As(err, &refusal), "login %d: %v", i, err)
			continue
		}
		_ = ch
		accepted++
	}
	require.NotNil(t, refusal, "one host took all %d sessions", maxSessions)
	require.Equal(t, iu.LoginRejInsufficientResources, refusal.Reason)
	require.Less(t, accepted, maxSessions)
	e, ok := h.logged("login rejected")
	require.True(t, ok)
	require.Contains(t, e.ContextMap()["detail"], "from this source address")

	// Another host, its own initiator: logs in, with two channels, and works.
	cfg := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.14.2")}
	cfg.InitiatorPortID[0] = 0x11
	chs := h.loginMulti(cfg, 2)
	clearUA(t, chs[0], 0)
	for _, ch := range chs {
		rsp, err := ch.Read10(ctxT(t), 0, 0, 8, testBlockSize)
		require.NoError(t, err)
		require.True(t, rsp.Good())
	}
}

// TestSec2OneHostCannotTakeEveryChannel: one host opens as many channels of one nexus as it is
// let; another host still gets channels.
func TestSec2OneHostCannotTakeEveryChannel(t *testing.T) {
	h := newHarness(t, harnessOpts{limits: srp.Limits{MaxChannelsTotal: 8, MaxChannels: 8}})
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.15.1"))
	require.NoError(t, err)
	cfg := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Node: node, QueueDepth: 4, MultiChannel: iu.MultiChanMulti}
	var accepted int
	for range 8 {
		if _, err := h.loginErr(cfg); err == nil {
			accepted++
		}
	}
	require.Less(t, accepted, 8, "one host took every channel of the target")
	other := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.15.2")}
	other.InitiatorPortID[0] = 0x22
	h.loginMulti(other, 2)
}

// TestSec2IdleTimeout: with limits.idle_timeout, a channel that receives nothing and holds
// nothing for that long is closed; a channel with commands keeps going.
func TestSec2IdleTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	h := newHarness(t, harnessOpts{limits: srp.Limits{IdleTimeout: idle}})
	busy := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.16.2")})
	clearUA(t, busy, 0)
	start := time.Now()
	cfg := srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.16.1")}
	cfg.InitiatorPortID[0] = 0x33
	h.login(cfg)
	for time.Since(start) < 4*idle {
		rsp, err := busy.TestUnitReady(ctxT(t), 0)
		require.NoError(t, err)
		require.True(t, rsp.Good())
		time.Sleep(idle / 8)
	}
	st := h.waitStats("the idle channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 1 })
	require.Equal(t, uint64(1), st.IdleClosed)
	e, ok := h.logged("closing channel")
	require.True(t, ok)
	require.Contains(t, e.ContextMap()["reason"], "idle")
	rsp, err := busy.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.True(t, rsp.Good())
}
