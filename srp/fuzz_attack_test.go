package srp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// Fuzz targets for what an initiator controls beyond the bytes of one IU: the login request
// as the target handles it end to end, descriptor tables whose keys are valid (so that the
// data really moves), and sequences of commands and task management over two channels.

// FuzzLogin sends arbitrary SRP_LOGIN_REQ private data through the whole login path (parse,
// checks, ACL, multichannel action, channel set-up, accept). The target must answer every
// request once, with an SRP_LOGIN_RSP or an SRP_LOGIN_REJ the initiator can decode, and keep
// serving another session.
func FuzzLogin(f *testing.F) {
	h := newHarness(f, harnessOpts{logLevel: zapcore.FatalLevel, limits: srp.Limits{BufferPoolSize: 16 << 20, MaxChannels: 4, MaxSessions: 8}})
	good, err := srptest.LoginRequest(h.cfg())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	mcfg := h.cfg()
	mcfg.MultiChannel = iu.MultiChanMulti
	multi, err := srptest.LoginRequest(mcfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(multi)
	short := bytes.Clone(good)
	binary.BigEndian.PutUint32(short[4:], 32) // it_iu_len below 64
	f.Add(short)
	f.Add(good[:20])
	f.Add(make([]byte, ib.MaxConnRequestPrivateData))

	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.7.1"))
	if err != nil {
		f.Fatal(err)
	}
	var probe *srptest.Channel
	var accepted []*memfabric.Conn
	f.Cleanup(func() {
		for _, c := range accepted {
			c.Close()
		}
		if probe != nil {
			_ = probe.Close()
		}
	})
	f.Fuzz(func(t *testing.T, priv []byte) {
		if len(priv) > ib.MaxConnRequestPrivateData {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if probe == nil {
			cfg := h.cfg()
			cfg.InitiatorPortID = iu.PortID{15: 0xF1}
			if probe, err = srptest.Login(ctx, h.fab, cfg); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "the probe's login counted", func() bool { return h.tgt.Stats().LoginsAccepted >= 1 })
		}
		before := h.tgt.Stats()
		conn, err := node.Connect(ctx, h.addr, priv, memfabric.ConnectParams{
			QP:                 ib.QPCaps{SendQueueDepth: 16, RecvQueueDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
			RNRRetryCount:      7,
			ResponderResources: 4,
		})
		var rej *memfabric.RejectedError
		switch {
		case err == nil:
			var rsp iu.LoginRsp = conn.PrivateData()
			if rsp.Validate() != nil {
				t.Fatalf("accepted with a private data the initiator cannot decode: % x", []byte(rsp))
			}
			accepted = append(accepted, conn)
			if len(accepted) > 6 { // keep the target under its limits
				accepted[0].Close()
				accepted = accepted[1:]
			}
		case errors.As(err, &rej):
			var lr iu.LoginRej = rej.PrivateData
			if lr.Validate() != nil {
				t.Fatalf("rejected with a private data the initiator cannot decode: % x", rej.PrivateData)
			}
		default:
			t.Fatalf("login neither accepted nor rejected: %v", err)
		}
		// The target counts an accepted login just after the REP went out: wait for it.
		answered := func() uint64 {
			after := h.tgt.Stats()
			return after.LoginsAccepted + after.LoginsRejected - before.LoginsAccepted - before.LoginsRejected
		}
		testutil.WaitFor(t, "the login counted", func() bool { return answered() >= 1 })
		if n := answered(); n != 1 {
			t.Fatalf("one request, %d answers counted", n)
		}
		if _, err := probe.TestUnitReady(ctx, 0); err != nil {
			t.Fatalf("the target stopped serving another session: %v", err)
		}
	})
}

// fuzzLUNBlocks is the size of the LUN FuzzDescriptors works on.
const fuzzLUNBlocks = 2048

// descLayout is a data buffer cut into segments at offsets of the initiator's memory region,
// described directly (one segment), by an indirect descriptor holding every segment, or by an
// external table in the region of which the IU holds the first partial descriptors.
type descLayout struct {
	sizes, offs []int
	external    bool
	partial     int // descriptors in the IU for external
	corrupt     bool
}

const (
	segStride = 8192 + 512
	tableOff  = 8 * segStride
	regionLen = tableOff + 8*iu.DirectBufSize
)

// decodeLayout turns fuzz bytes into a layout of total bytes.
func decodeLayout(total int, b []byte) descLayout {
	at := func(i int) int {
		if i < len(b) {
			return int(b[i])
		}
		return 0
	}
	n := 1 + at(0)%8
	flags := at(1)
	l := descLayout{external: flags&1 != 0 && n > 1, corrupt: flags&0x80 != 0}
	if l.external {
		l.partial = (flags >> 1) % n
	}
	// Cut points from the next bytes, kept in order: zero-length segments are allowed.
	cuts := []int{0}
	for i := 1; i < n; i++ {
		c := max(cuts[i-1], at(1+i)*total/255)
		cuts = append(cuts, min(c, total))
	}
	cuts = append(cuts, total)
	for i := 0; i < n; i++ {
		l.sizes = append(l.sizes, cuts[i+1]-cuts[i])
		l.offs = append(l.offs, i*segStride+at(9+i)%512)
	}
	return l
}

// FuzzDescriptors reads and writes through descriptor layouts whose rkeys are valid, so that
// the target really moves the data: direct, indirect in the IU, external tables with partial
// lists, segments of any length at any alignment. A consistent command must end GOOD with the
// bytes in the right places (checked against a shadow copy of the LUN); one whose TOTAL
// LENGTH disagrees with its descriptors must not end GOOD, and must not move data.
func FuzzDescriptors(f *testing.F) {
	f.Add(false, uint16(0), uint8(7), []byte{0})
	f.Add(true, uint16(9), uint8(3), []byte{3, 0, 80, 160, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Add(true, uint16(100), uint8(15), []byte{7, 3, 10, 20, 30, 40, 50, 60, 70, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add(false, uint16(2000), uint8(1), []byte{5, 0x85, 255, 0, 128, 64})

	h := newHarness(f, harnessOpts{logLevel: zapcore.FatalLevel, lunSize: fuzzLUNBlocks * testBlockSize,
		limits: srp.Limits{BufferPoolSize: 16 << 20}})
	shadow := make([]byte, fuzzLUNBlocks*testBlockSize)
	var ch *srptest.Channel
	var mr ib.MR
	mem := make([]byte, regionLen)
	tag := iu.Tag(0x7000_0000)
	f.Cleanup(func() {
		if mr != nil {
			_ = mr.Deregister()
		}
		if ch != nil {
			_ = ch.Close()
		}
	})
	f.Fuzz(func(t *testing.T, write bool, lba uint16, blocks uint8, layout []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if ch == nil {
			var err error
			if ch, err = srptest.Login(ctx, h.fab, h.cfg()); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				_, _ = ch.TestUnitReady(ctx, 0)
			}
			if mr, err = ch.Node().PD().RegisterMemory(mem, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
				t.Fatal(err)
			}
		}
		nblk := 1 + int(blocks%16)
		first := int(lba) % (fuzzLUNBlocks - nblk)
		total := nblk * testBlockSize
		l := decodeLayout(total, layout)
		data := testutil.Pattern(total, int(tag))
		pos := 0
		descs := make([]iu.DirectBufFields, len(l.sizes))
		for i, sz := range l.sizes {
			seg := mem[l.offs[i] : l.offs[i]+sz]
			if write {
				copy(seg, data[pos:pos+sz])
			} else {
				for j := range seg {
					seg[j] = 0xEE
				}
			}
			descs[i] = iu.DirectBufFields{VA: mr.Addr() + uint64(l.offs[i]), Key: mr.RKey(), Len: uint32(sz)}
			pos += sz
		}
		buf := iu.DataBufFields{Format: iu.DescDirect, Direct: descs[0]}
		if len(descs) > 1 {
			totalLen := uint32(total)
			if l.corrupt {
				totalLen += testBlockSize
			}
			inIU := descs
			if l.external {
				inIU = descs[:l.partial]
				for i, d := range descs {
					b := mem[tableOff+i*iu.DirectBufSize:]
					binary.BigEndian.PutUint64(b, d.VA)
					binary.BigEndian.PutUint32(b[8:], d.Key)
					binary.BigEndian.PutUint32(b[12:], d.Len)
				}
			}
			buf = iu.DataBufFields{Format: iu.DescIndirect, DescCnt: uint8(len(inIU)), Indirect: iu.IndirectBufFields{
				Table:    iu.DirectBufFields{VA: mr.Addr() + tableOff, Key: mr.RKey(), Len: uint32(len(descs) * iu.DirectBufSize)},
				TotalLen: totalLen,
				Descs:    inIU,
			}}
		} else if l.corrupt {
			return // one direct descriptor has no TOTAL LENGTH to disagree with
		}
		tag++
		cmd := iu.CmdFields{Tag: tag}
		op := byte(0x28)
		if write {
			op = 0x2A
			cmd.DataOut = buf
		} else {
			cmd.DataIn = buf
		}
		cmd.CDB = [16]byte{op, 0, byte(first >> 24), byte(first >> 16), byte(first >> 8), byte(first), 0, byte(nblk >> 8), byte(nblk)}
		n, err := iu.CmdLen(&cmd)
		if err != nil || n > int(ch.MaxITIULen()) {
			return
		}
		msg := make([]byte, n)
		if _, err := iu.Cmd(msg).Encode(&cmd); err != nil {
			t.Fatal(err)
		}
		if err := ch.SendRaw(msg); err != nil {
			t.Fatalf("sending: %v", err)
		}
		var rsp iu.Rsp
		for {
			b, err := ch.NextUnsolicited(ctx)
			if err != nil {
				t.Fatalf("no response to a command with valid keys (layout %+v): %v", l, err)
			}
			if iu.Opcode(b[0]) == iu.OpRsp && iu.Rsp(b).Tag() == tag {
				rsp = iu.Rsp(b)
				break
			}
		}
		good := rsp.Status() == uint8(scsi.StatusGood)
		if l.corrupt {
			if good {
				t.Fatalf("TOTAL LENGTH %d for %d bytes of descriptors ended GOOD", total+testBlockSize, total)
			}
			return
		}
		if !good {
			t.Fatalf("consistent layout %+v: status %#x", l, rsp.Status())
		}
		lun := shadow[first*testBlockSize : first*testBlockSize+total]
		if write {
			copy(lun, data)
			got, err := ch.Read10(ctx, 0, uint32(first), uint16(nblk), testBlockSize)
			if err != nil || !got.Good() || !bytes.Equal(got.DataIn, lun) {
				t.Fatalf("written through layout %+v, read back differs (err %v)", l, err)
			}
			return
		}
		pos = 0
		for i, sz := range l.sizes {
			if !bytes.Equal(mem[l.offs[i]:l.offs[i]+sz], lun[pos:pos+sz]) {
				t.Fatalf("segment %d of layout %+v: data-in landed wrong", i, l)
			}
			pos += sz
		}
	})
}

// FuzzTwoChannelSequences runs a sequence of commands and task management functions over two
// channels of two initiators, each step chosen by a byte. Whatever the interleaving, every
// task management function is answered, the target keeps both channels (or closes one
// cleanly), every buffer comes back, and afterwards both initiators are served again.
func FuzzTwoChannelSequences(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{0x10, 0x11, 0x14, 0x05, 0x16, 0x00})
	f.Add([]byte{1, 1, 1, 0x15, 0x03, 0x07, 0x02})

	h := newHarness(f, harnessOpts{logLevel: zapcore.FatalLevel, gate: true, luns: 2,
		limits: srp.Limits{BufferPoolSize: 16 << 20, RDMATimeout: 2 * time.Second}})
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 32 {
			steps = steps[:32]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var chs [2]*srptest.Channel
		for i := range chs {
			cfg := h.cfg()
			cfg.InitiatorPortID = iu.PortID{0xfd, 15: byte(i)}
			c, err := srptest.Login(ctx, h.fab, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			chs[i] = c
		}
		var pending []*srptest.Pending
		held := false
		for _, s := range steps {
			c := chs[s>>4&1]
			lun := uint16(s >> 5 & 1)
			switch s & 0x7 {
			case 0, 1: // READ or WRITE, in flight
				req := &srptest.Request{LUN: lun, CDB: srptest.CDBRead10(uint32(s), 8), DataInLen: 4096}
				if s&1 == 1 {
					req = &srptest.Request{LUN: lun, CDB: srptest.CDBWrite10(uint32(s), 8), DataOut: testutil.Pattern(4096, int(s))}
				}
				if p, err := c.Submit(ctx, req); err == nil {
					pending = append(pending, p)
				}
			case 2:
				if !held {
					h.gate.hold()
					held = true
				}
			case 3:
				h.gate.release()
				held = false
			case 4:
				if len(pending) > 0 {
					_, _ = c.Abort(ctx, pending[len(pending)-1])
				}
			default:
				// A task management function waits for the commands it aborts to leave the
				// backstore; a held gate stands for a slow disk, not one that never returns.
				if held {
					time.AfterFunc(20*time.Millisecond, h.gate.release)
					held = false
				}
				fn := [...]iu.TskMgmtFunc{iu.TskLUNReset, iu.TskAbortTaskSet, iu.TskClearTaskSet}[int(s&7)-5]
				tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.TaskMgmt(tctx, fn, lun, 0)
				tcancel()
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%v not answered", fn)
				}
			}
		}
		h.gate.release()
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		for _, p := range pending {
			_, _ = p.Wait(wctx) // aborted commands get no response
			p.Forget()
		}
		wcancel()
		for i, c := range chs {
			if c.Err() != nil {
				continue // closed by the target: allowed, it must not hurt the other
			}
			for range 4 {
				if rsp, err := c.TestUnitReady(ctx, 0); err != nil {
					t.Fatalf("channel %d after the sequence: %v", i, err)
				} else if rsp.Good() {
					break
				}
			}
		}
		for _, c := range chs {
			_ = c.Close()
		}
		testutil.WaitFor(t, "channels closed", func() bool { return h.tgt.Stats().ChannelsOpen == 0 })
		testutil.WaitFor(t, "buffers back in the pool", h.tgt.PoolsIdle)
	})
}
