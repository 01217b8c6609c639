package srp

import (
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/lib/loglimit"
)

// channelParams are the outcome of a successful login check.
type channelParams struct {
	credits, sqDepth, maxDesc int
	immOff                    uint16
	initiatorDepth, respRes   uint8
	inline                    int
	// ibSrc is the initiator's InfiniBand address, for a login through an AF_IB listener.
	ibSrc *ib.IBAddr
}

// newChannel allocates and registers everything a channel needs and builds its receive work
// requests, in its group's queues q; nothing is posted yet.
func newChannel(t *Target, sess *session, host *source, pool *bufPool, pd ib.ProtectionDomain, g *pollGroup, q *channelQueues, p channelParams, remote netip.AddrPort) (*channel, error) {
	lim := t.lim
	ch := &channel{t: t, sess: sess, src: host, g: g, dev: q.dev, id: t.chanID.Add(1), pool: pool, remote: remote, ibSrc: p.ibSrc}
	ch.channelGeom = channelGeom{credits: p.credits, nctx: 2 * p.credits, sqDepth: p.sqDepth, maxDesc: p.maxDesc,
		maxIT: lim.MaxITIULen, maxTI: lim.MaxTIIULen, immOff: p.immOff, queues: q, inline: p.inline}
	pad := immPad(ch.immOff)
	stride := roundUp(pad+int(ch.maxIT), recvAlign)
	if q.srq == nil {
		ch.nrecv = p.credits + spareRecvs
	}
	ch.sendStride = roundUp(int(ch.maxTI), sendAlign)
	recvBytes := ch.nrecv * stride
	size := recvBytes + (ch.nctx+ctlSendSlots)*ch.sendStride
	slab, err := ib.NewSlab(size)
	if err != nil {
		return nil, fmt.Errorf("srp: channel memory of %d bytes: %w", size, err)
	}
	ch.slab = slab
	ch.mem = slab.Bytes()[:size]
	mr, err := pd.RegisterMemory(ch.mem, ib.AccessLocalWrite)
	if err != nil {
		_ = slab.Close()
		return nil, fmt.Errorf("srp: registering %d bytes of channel memory: %w", size, err)
	}
	ch.mr = mr
	if ch.rq = q.srq; ch.rq == nil {
		ch.rq = &recvRing{}
		ch.rq.init(mr, ch.mem, ch.nrecv, pad, stride, ch.maxIT)
		ch.recvPosted = ch.nrecv
	}
	ch.sendBufOff = uint64(recvBytes)
	ch.ctlOff = uint64(recvBytes + ch.nctx*ch.sendStride)
	ch.initCtxs()
	ch.closedCh = make(chan struct{})
	ch.wrs, ch.sges = g.scratch(ch.maxDesc + 1)
	// The batch grows as needed up to batchMax: an idle channel keeps a small one.
	ch.batchMax = max(2*(ch.maxDesc+1), 256)
	ch.batch = make([]ib.SendWR, 0, 16)
	ch.batchSGEs = make([]ib.SGE, 0, 16)
	ch.sqFree = ch.sqDepth
	ch.ledger = creditLedger{granted: int64(ch.credits)}
	ch.logs = channelLogs{busy: loglimit.Window{Burst: 1, Every: busyLogEvery},
		refused: loglimit.Window{Burst: rejectLogBurst, Every: rejectLogEvery}}
	ch.timer.t = time.AfterFunc(time.Hour, ch.timerFire)
	ch.timer.t.Stop()
	src := zap.Stringer("src", remote)
	if p.ibSrc != nil {
		src = zap.Stringer("src", *p.ibSrc)
	}
	ch.log = sess.log.With(zap.Uint64("channel", ch.id), src)
	return ch, nil
}

// start hands the channel, on its accepted connection, to its poll group. A target with a
// startHook (scripted tests) hands it to the test too, which drives the group's steps.
func (ch *channel) start(conn ib.Conn) {
	ch.conn = conn
	ch.pool.register(ch)
	ch.startIdleWatch()
	ch.g.start(ch)
	if ch.t.startHook != nil {
		// A script's group runs no goroutine: the hook hands the channel to the test, whose
		// steps run the group once it has set the channel up (its clock).
		ch.t.startHook(ch)
	}
}
