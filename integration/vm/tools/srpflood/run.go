package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/verbs"
	"github.com/srptarget/srptarget/srp/iu"
)

// iuSlot is the room for one SRP_CMD in the registered memory: 48 bytes of header and CDB and
// one 16-byte direct descriptor; rxSlot the room for one IU received (an SRP_RSP with sense).
const (
	iuSlot = 64
	rxSlot = 256
	// recvID marks the work request IDs of receives: a failed completion's opcode is not
	// defined (ibv_poll_cq(3)), its ID is.
	recvID = 1 << 32
)

// channel is one logged-in RDMA channel of srpflood and its registered memory: the command
// slots, the receive slots, then (page aligned) the data buffer every command reads into. The
// commands share the buffer: what matters is the target's buffers, not ours.
type channel struct {
	cfg   *config
	conn  *verbs.Conn
	mr    ib.MR
	slab  *ib.Slab
	slots int // command slots, used round robin
	rxOff int
	data  []byte
	next  int // the next command's slot and tag
	nrx   int // receives posted so far
	// what the end line reports, summed over the channels
	sendOK, sendFailed, got int
}

// run logs in cfg.channels channels, sends the commands on each and holds the connections
// (see the package comment); it ends when the target has disconnected them all, or after
// cfg.duration.
func run(cfg config, out io.Writer) error {
	var chs []*channel
	defer func() {
		for _, ch := range chs {
			ch.close()
		}
	}()
	for i := range cfg.channels {
		ch, err := login(&cfg, i, out)
		if err != nil {
			return fmt.Errorf("channel %d: %w", i, err)
		}
		chs = append(chs, ch)
	}
	sent := time.Now()
	total := 0
	for _, ch := range chs {
		n, err := ch.sendInitial()
		if err != nil {
			return err
		}
		total += n
	}
	fmt.Fprintf(out, "SRPFLOOD sent commands=%d bytes=%d lun=%d lba=%d blocks=%d channels=%d trickle=%v\n",
		total, cfg.size, cfg.lun, cfg.lba, cfg.size/cfg.blockSize, len(chs), cfg.trickle)

	var mu sync.Mutex // out and the sums
	reasons := make(chan string, len(chs))
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()
	reported := false
	for _, ch := range chs {
		go func() {
			reasons <- ch.hold(ctx, func() {
				mu.Lock()
				defer mu.Unlock()
				ok, failed := 0, 0
				for _, c := range chs {
					ok, failed = ok+c.sendOK, failed+c.sendFailed
				}
				if !reported && ok+failed >= total {
					reported = true
					fmt.Fprintf(out, "SRPFLOOD send completions ok=%d failed=%d after_s=%.1f\n", ok, failed, time.Since(sent).Seconds())
				}
			}, &mu)
		}()
	}
	// The end: the first reason that is not the target's disconnect, or "disconnected" once
	// the target has disconnected every channel.
	reason := "disconnected"
	for range chs {
		if r := <-reasons; r != "disconnected" {
			reason = r
			cancel()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	ok, failed, got, changedBytes := 0, 0, 0, 0
	for _, ch := range chs {
		ok, failed, got, changedBytes = ok+ch.sendOK, failed+ch.sendFailed, got+ch.got, changedBytes+changed(ch.data)
	}
	fmt.Fprintf(out, "SRPFLOOD end reason=%s after_s=%.1f data_in_bytes=%d send_ok=%d send_failed=%d responses=%d\n",
		reason, time.Since(sent).Seconds(), changedBytes, ok, failed, got)
	return nil
}

// login connects channel i: the first with MULTI-CHANNEL ACTION single, the others multi, as
// ib_srp logs in the channels of one target port.
func login(cfg *config, i int, out io.Writer) (*channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	route, err := verbs.Resolve(ctx, cfg.target, verbs.ResolveOptions{Src: cfg.source})
	if err != nil {
		return nil, err
	}
	defer route.Close() // a no-op once Connect has used the route

	ch := &channel{cfg: cfg, slots: 2 * cfg.commands}
	iuArea := ch.slots * iuSlot
	ch.rxOff = iuArea
	rxArea := rxSlots(cfg) * rxSlot
	dataOff := (iuArea + rxArea + 4095) / 4096 * 4096
	if ch.slab, err = ib.NewSlab(dataOff + int(cfg.size)); err != nil {
		return nil, err
	}
	ch.mr, err = route.PD().RegisterMemory(ch.slab.Bytes(), ib.AccessLocalWrite|ib.AccessRemoteWrite)
	if err != nil {
		ch.slab.Close()
		return nil, fmt.Errorf("registering %d bytes: %w", len(ch.slab.Bytes()), err)
	}
	ch.data = ch.mr.Bytes()[dataOff : dataOff+int(cfg.size)]
	for i := range ch.data {
		ch.data[i] = fillByte
	}

	lim := route.Limits()
	caps := ib.QPCaps{
		SendQueueDepth: min(ch.slots, lim.MaxQueueDepth),
		// verbs wants a receive queue; without a trickle nothing is ever posted to it.
		RecvQueueDepth: min(rxSlots(cfg), lim.MaxQueueDepth),
		MaxSendSGE:     1,
		MaxRecvSGE:     1,
	}
	action := iu.MultiChanSingle
	if i > 0 {
		action = iu.MultiChanMulti
	}
	ch.conn, err = route.Connect(ctx, loginRequest(cfg, action), verbs.ConnectParams{
		QP:                 caps,
		RNRRetryCount:      rnrRetryCount,
		ResponderResources: uint8(min(responderResources, lim.MaxRDAtomic)),
		InitiatorDepth:     0, // an SRP initiator never issues RDMA READs
	})
	if err != nil {
		ch.close()
		var re *verbs.RejectedError
		if errors.As(err, &re) {
			if rej, perr := iu.Parse[iu.LoginRej](re.PrivateData); perr == nil {
				return nil, fmt.Errorf("login rejected: %v", rej.Reason)
			}
		}
		return nil, fmt.Errorf("login: %w", err)
	}
	rsp, err := iu.Parse[iu.LoginRsp](ch.conn.PrivateData())
	if err != nil {
		ch.close()
		return nil, fmt.Errorf("login response in the REP's private data: %w", err)
	}
	fmt.Fprintf(out, "SRPFLOOD login ok channel=%d credits=%d max_it_iu_len=%d max_ti_iu_len=%d local=%v remote=%v\n",
		i, rsp.ReqLimDelta, rsp.MaxITIULen, rsp.MaxTIIULen, ch.conn.LocalAddr(), ch.conn.RemoteAddr())
	if n := min(cfg.commands, int(rsp.ReqLimDelta)); n < cfg.commands {
		fmt.Fprintf(out, "SRPFLOOD note: channel %d: %d commands asked for, %d granted credits\n", i, cfg.commands, rsp.ReqLimDelta)
		cfg.commands = n // every channel of one target port gets the same credits
	}
	return ch, nil
}

// rxSlots is the receive buffers a trickling channel cycles through.
func rxSlots(cfg *config) int {
	if cfg.trickle == 0 {
		return 1
	}
	return 16
}

func (ch *channel) close() {
	if ch.conn != nil {
		ch.conn.Close()
	}
	if ch.mr != nil {
		ch.mr.Deregister()
	}
	if ch.slab != nil {
		ch.slab.Close()
	}
}

// sendInitial posts the channel's first cfg.commands READs.
func (ch *channel) sendInitial() (int, error) {
	for range ch.cfg.commands {
		if err := ch.send(); err != nil {
			return 0, err
		}
	}
	return ch.cfg.commands, nil
}

// send posts the next READ(10), in the next command slot.
func (ch *channel) send() error {
	slot := ch.next % ch.slots
	msg, err := readCmd(ch.cfg, ch.next, ch.mr.Addr()+uint64(len(ch.mr.Bytes())-len(ch.data)), ch.mr.RKey())
	if err != nil {
		return err
	}
	ch.next++
	off := slot * iuSlot
	copy(ch.mr.Bytes()[off:off+iuSlot], msg)
	wr := ib.SendWR{ID: uint64(slot), Op: ib.OpSend, Signaled: true,
		SGL: []ib.SGE{{MR: ch.mr, Offset: uint64(off), Length: uint32(len(msg))}}}
	if _, err := ch.conn.PostSend([]ib.SendWR{wr}); err != nil {
		return fmt.Errorf("posting command %d: %w", ch.next, err)
	}
	return nil
}

// postRecv posts one receive buffer (the trickle).
func (ch *channel) postRecv() {
	slot := ch.nrx % rxSlots(ch.cfg)
	ch.nrx++
	off := ch.rxOff + slot*rxSlot
	wr := ib.RecvWR{ID: recvID | uint64(slot), SGL: []ib.SGE{{MR: ch.mr, Offset: uint64(off), Length: rxSlot}}}
	_, _ = ch.conn.PostRecv([]ib.RecvWR{wr}) // fails only once the target disconnected
}

// hold keeps the channel until ctx ends ("duration") or the target disconnects it. Without a
// trickle no receive is ever posted and only our SENDs complete; with one, a receive is
// posted every cfg.trickle and each response that arrives is answered with a new READ, so
// that the commands outstanding stay cfg.commands. progress is called after each poll, with
// mu held while the counters change.
func (ch *channel) hold(ctx context.Context, progress func(), mu *sync.Mutex) string {
	tick := time.Second
	if ch.cfg.trickle > 0 {
		tick = ch.cfg.trickle
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	wcs := make([]ib.Completion, 32)
	for {
		select {
		case <-ctx.Done():
			return "duration"
		case <-ch.conn.Ready():
		case <-ticker.C:
			if ch.cfg.trickle > 0 {
				ch.postRecv()
			}
		}
		for {
			k, err := ch.conn.PollCompletions(wcs)
			if err != nil {
				return "poll-failed"
			}
			mu.Lock()
			for _, wc := range wcs[:k] {
				recv := wc.ID&recvID != 0
				switch {
				case recv && wc.Status == ib.StatusSuccess:
					ch.got++
					_ = ch.send() // keep the commands outstanding
				case recv: // flushed once the target disconnected
				case wc.Status == ib.StatusSuccess:
					ch.sendOK++
				default:
					ch.sendFailed++
				}
			}
			mu.Unlock()
			progress()
			if k < len(wcs) {
				break
			}
		}
		for {
			ev, ok := ch.conn.PollEvent()
			if !ok {
				break
			}
			switch ev {
			case ib.EventDisconnected:
				return "disconnected"
			case ib.EventDeviceRemoved:
				return "device-removed"
			}
		}
	}
}
