package srptest

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
	"github.com/srptarget/srptarget/srp/iu"
)

// stubConn accepts every post and never completes anything (ibtest.NopConn), keeping a copy
// of what the channel sends.
type stubConn struct {
	ibtest.NopConn
	sends [][]byte
}

func (s *stubConn) PostSend(w []ib.SendWR) (int, error) {
	for _, wr := range w {
		g := wr.SGL[0]
		s.sends = append(s.sends, append([]byte(nil), g.MR.Bytes()[g.Offset:g.Offset+uint64(g.Length)]...))
	}
	return len(w), nil
}
func (s *stubConn) Vanish() {}

const fuzzTag = iu.Tag(0x0102030405060708)

// newStubChannel is a channel after a login granting 32 credits, with one read of 64 bytes in
// flight under fuzzTag, and no poller.
func newStubChannel(t testing.TB) (*Channel, *stubConn, *request) {
	cfg, err := Config{Addr: testAddr}.withDefaults()
	require.NoError(t, err)
	sc := &stubConn{NopConn: ibtest.NopConn{ReadyC: make(chan struct{})}}
	rsp := make([]byte, iu.LoginRspSize)
	iu.LoginRsp(rsp).Encode(&iu.LoginRspFields{ReqLimDelta: 32, MaxITIULen: 8276, MaxTIIULen: 8260,
		RspFlags: iu.LoginRspImmedSupp})
	c := &Channel{
		cfg: cfg, conn: sc, pd: newFakePD(), loginRspIU: rsp,
		wake: make(chan struct{}), pending: make(map[iu.Tag]*request), raw: make(map[uint64]ib.MR),
		sendWait: make(map[uint64]chan ib.Status), down: make(chan struct{}), tlogout: make(chan struct{}),
		unsolWake: make(chan struct{}),
	}
	require.NoError(t, c.setup())
	r := &request{tag: fuzzTag, tagIdx: 0, posted: true, done: make(chan struct{}),
		build: &cmdBuild{inBuf: make([]byte, 64)}}
	c.tagBusy[0] = true
	c.pending[fuzzTag] = r
	return c, sc, r
}

func FuzzHandleIU(f *testing.F) {
	enc := func(n int, e func(b []byte) (int, error)) []byte {
		b := make([]byte, n)
		m, _ := e(b)
		return b[:m]
	}
	f.Add(enc(100, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{Tag: fuzzTag, ReqLimDelta: 1, Flags: iu.DIUNDER, DataInResCnt: 28})
	}))
	f.Add(enc(100, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{Tag: fuzzTag, ReqLimDelta: 3, Status: 2, SenseData: senseFixed(5, 0x24, 0)})
	}))
	f.Add(enc(16, func(b []byte) (int, error) {
		return iu.CredReq(b).Encode(&iu.CredReqFields{ReqLimDelta: 4, Tag: 9}), nil
	}))
	f.Add(enc(64, func(b []byte) (int, error) {
		return iu.AerReq(b).Encode(&iu.AerReqFields{ReqLimDelta: 1, Tag: 2, SenseData: senseFixed(6, 0x29, 0)})
	}))
	f.Add(enc(16, func(b []byte) (int, error) {
		return iu.TLogout(b).Encode(&iu.TLogoutFields{Reason: iu.TLogoutInvalidIULength}), nil
	}))
	f.Add([]byte{})
	f.Add([]byte{0xc1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x7e, 1, 2})
	f.Fuzz(func(t *testing.T, msg []byte) {
		c, sc, r := newStubChannel(t)
		c.mu.Lock()
		c.handleIULocked(msg)
		c.mu.Unlock()

		want := int64(32)
		if len(msg) >= 8 && (msg[0] == 0xc1 || msg[0] == 0x81 || msg[0] == 0x82) {
			want += int64(binary.BigEndian.Uint32(msg[4:8]))
		}
		require.Equal(t, want, c.Credits(), "every REQUEST LIMIT DELTA counts, nothing else")
		require.LessOrEqual(t, len(sc.sends), 1, "at most one answer")
		for _, s := range sc.sends {
			require.Len(t, s, 16)
			require.Contains(t, []byte{0x41, 0x42}, s[0])
			require.Equal(t, msg[8:16], s[8:16], "the answer echoes the TAG")
		}
		select {
		case <-r.done:
			require.Zero(t, c.Outstanding())
			require.False(t, c.tagBusy[0], "the tag is free again")
			if r.err == nil {
				require.LessOrEqual(t, len(r.rsp.DataIn), 64)
				require.Equal(t, msg, r.rsp.IU)
				require.Equal(t, fuzzTag, r.rsp.Tag)
			} else {
				require.ErrorIs(t, r.err, ErrProtocol)
			}
		default:
			require.Equal(t, 1, c.Outstanding())
		}
	})
}
