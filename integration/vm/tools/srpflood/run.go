package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/verbs"
	"github.com/srptarget/srptarget/srp/iu"
)

// iuSlot is the room for one SRP_CMD in the registered memory: 48 bytes of header and CDB and
// one 16-byte direct descriptor.
const iuSlot = 64

// run logs in, sends the commands and holds the connection (see the package comment).
func run(cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	route, err := verbs.Resolve(ctx, cfg.target, verbs.ResolveOptions{})
	if err != nil {
		return err
	}
	defer route.Close() // a no-op once Connect has used the route

	// One slab: the IUs, then (page aligned) the data buffer every command reads into. The
	// commands share the buffer: what matters is the target's buffers, not ours.
	iuArea := (cfg.commands*iuSlot + 4095) / 4096 * 4096
	slab, err := ib.NewSlab(iuArea + int(cfg.size))
	if err != nil {
		return err
	}
	defer slab.Close()
	mr, err := route.PD().RegisterMemory(slab.Bytes(), ib.AccessLocalWrite|ib.AccessRemoteWrite)
	if err != nil {
		return fmt.Errorf("registering %d bytes: %w", len(slab.Bytes()), err)
	}
	defer mr.Deregister()
	data := mr.Bytes()[iuArea : iuArea+int(cfg.size)]
	for i := range data {
		data[i] = fillByte
	}

	lim := route.Limits()
	caps := ib.QPCaps{
		SendQueueDepth: min(cfg.commands, lim.MaxQueueDepth),
		// verbs wants a receive queue; nothing is ever posted to it.
		RecvQueueDepth: 1,
		MaxSendSGE:     1,
		MaxRecvSGE:     1,
	}
	conn, err := route.Connect(ctx, loginRequest(&cfg), verbs.ConnectParams{
		QP:                 caps,
		RNRRetryCount:      rnrRetryCount,
		ResponderResources: uint8(min(responderResources, lim.MaxRDAtomic)),
		InitiatorDepth:     0, // an SRP initiator never issues RDMA READs
	})
	if err != nil {
		var re *verbs.RejectedError
		if errors.As(err, &re) {
			if rej, perr := iu.Parse[iu.LoginRej](re.PrivateData); perr == nil {
				return fmt.Errorf("login rejected: %v", rej.Reason)
			}
		}
		return fmt.Errorf("login: %w", err)
	}
	defer conn.Close()
	rsp, err := iu.Parse[iu.LoginRsp](conn.PrivateData())
	if err != nil {
		return fmt.Errorf("login response in the REP's private data: %w", err)
	}
	fmt.Fprintf(out, "SRPFLOOD login ok credits=%d max_it_iu_len=%d max_ti_iu_len=%d local=%v remote=%v\n",
		rsp.ReqLimDelta, rsp.MaxITIULen, rsp.MaxTIIULen, conn.LocalAddr(), conn.RemoteAddr())

	n := min(cfg.commands, int(rsp.ReqLimDelta), caps.SendQueueDepth)
	if n < cfg.commands {
		fmt.Fprintf(out, "SRPFLOOD note: %d commands asked for, %d sent (credits %d, send queue %d)\n",
			cfg.commands, n, rsp.ReqLimDelta, caps.SendQueueDepth)
	}
	if n == 0 {
		return errors.New("the login granted no credit")
	}
	wrs := make([]ib.SendWR, n)
	for i := range n {
		msg, err := readCmd(&cfg, i, mr.Addr()+uint64(iuArea), mr.RKey())
		if err != nil {
			return err
		}
		off := i * iuSlot
		copy(mr.Bytes()[off:off+iuSlot], msg)
		wrs[i] = ib.SendWR{ID: uint64(i), Op: ib.OpSend, Signaled: true,
			SGL: []ib.SGE{{MR: mr, Offset: uint64(off), Length: uint32(len(msg))}}}
	}
	if posted, err := conn.PostSend(wrs); err != nil {
		return fmt.Errorf("posting command %d of %d: %w", posted, n, err)
	}
	sent := time.Now()
	fmt.Fprintf(out, "SRPFLOOD sent commands=%d bytes=%d lun=%d lba=%d blocks=%d\n",
		n, cfg.size, cfg.lun, cfg.lba, cfg.size/cfg.blockSize)

	// Hold the connection: no receive is ever posted. Only our SENDs complete; the target's
	// disconnect ends the wait early. A tick polls too, in case a wake-up is missed.
	deadline := time.NewTimer(cfg.duration)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	wcs := make([]ib.Completion, 32)
	sendOK, sendFailed, reported := 0, 0, false
	end := func(reason string) error {
		fmt.Fprintf(out, "SRPFLOOD end reason=%s after_s=%.1f data_in_bytes=%d send_ok=%d send_failed=%d\n",
			reason, time.Since(sent).Seconds(), changed(data), sendOK, sendFailed)
		return nil
	}
	for {
		select {
		case <-deadline.C:
			return end("duration")
		case <-conn.Ready():
		case <-tick.C:
		}
		for {
			k, err := conn.PollCompletions(wcs)
			if err != nil {
				return fmt.Errorf("polling completions: %w", err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status == ib.StatusSuccess {
					sendOK++
				} else {
					sendFailed++
					if sendFailed == 1 {
						fmt.Fprintf(out, "SRPFLOOD send %d completed with %v\n", wc.ID, wc.Status)
					}
				}
			}
			if k < len(wcs) {
				break
			}
		}
		if !reported && sendOK+sendFailed == n {
			reported = true
			fmt.Fprintf(out, "SRPFLOOD send completions ok=%d failed=%d after_s=%.1f\n",
				sendOK, sendFailed, time.Since(sent).Seconds())
		}
		for {
			ev, ok := conn.PollEvent()
			if !ok {
				break
			}
			switch ev {
			case ib.EventDisconnected:
				return end("disconnected")
			case ib.EventDeviceRemoved:
				return end("device-removed")
			}
		}
	}
}
