package srp_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// FuzzChannelIU sends arbitrary IUs to a live target. Whatever arrives, the target must not
// panic, must answer or close that channel, and must keep serving another session.
func FuzzChannelIU(f *testing.F) {
	read10 := [16]byte{0x28, 0, 0, 0, 0, 0, 0, 0, 8}
	add := func(fields iu.CmdFields) {
		n, _ := iu.CmdLen(&fields)
		b := make([]byte, n)
		_, _ = iu.Cmd(b).Encode(&fields)
		f.Add(b)
	}
	add(iu.CmdFields{Tag: 1, CDB: read10, DataIn: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: 0x1000, Key: 1, Len: 4096}}})
	add(iu.CmdFields{Tag: 2, CDB: [16]byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 1}, DataOut: iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: make([]byte, 512)}})
	add(iu.CmdFields{Tag: 3, CDB: read10, DataIn: iu.DataBufFields{Format: iu.DescIndirect, DescCnt: 1, Indirect: iu.IndirectBufFields{
		Table: iu.DirectBufFields{VA: 0x2000, Key: 2, Len: 48}, TotalLen: 4096, Descs: []iu.DirectBufFields{{VA: 0x1000, Key: 1, Len: 1024}}}}})
	add(iu.CmdFields{Tag: 4, CDB: [16]byte{0x00}})
	tm := make([]byte, iu.TskMgmtSize)
	iu.TskMgmt(tm).Encode(&iu.TskMgmtFields{Tag: 5, Func: iu.TskLUNReset})
	f.Add(tm)
	f.Add([]byte{0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Add([]byte{0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Add([]byte{0xFF})

	h := newHarness(f, harnessOpts{logLevel: zapcore.FatalLevel, limits: srp.Limits{BufferPoolSize: 16 << 20}})
	var probe, ch *srptest.Channel
	f.Cleanup(func() {
		for _, c := range []*srptest.Channel{probe, ch} {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) == 0 || len(msg) > 2*srp.DefaultMaxITIULen {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		if probe == nil {
			if probe, err = srptest.Login(ctx, h.fab, h.cfg()); err != nil {
				t.Fatal(err)
			}
		}
		if ch == nil || ch.Err() != nil {
			if ch != nil {
				_ = ch.Close()
			}
			cfg := h.cfg()
			cfg.InitiatorPortID = iu.PortID{15: 0xF0}
			if ch, err = srptest.Login(ctx, h.fab, cfg); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.SendRaw(msg); err != nil {
			return
		}
		// Either the channel answers a command after the IU, or it was closed.
		_, _ = ch.TestUnitReady(ctx, 0)
		if _, err := probe.TestUnitReady(ctx, 0); err != nil {
			t.Fatalf("the target stopped serving another session: %v", err)
		}
	})
}
