package srp_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// requireRej checks the REJ private data: the SRP_LOGIN_REJ, then the zero padding the CM adds
// up to its private data size.
func requireRej(t *testing.T, raw []byte, reason uint32, tag uint64) {
	t.Helper()
	require.GreaterOrEqual(t, len(raw), iu.LoginRejSize)
	require.Equal(t, rejBytes(reason, tag), raw[:iu.LoginRejSize])
	require.Equal(t, make([]byte, len(raw)-iu.LoginRejSize), raw[iu.LoginRejSize:])
}

// rejBytes is an SRP_LOGIN_REJ written out by hand (include/scsi/srp.h struct srp_login_rej): opcode C2, reason,
// tag, supported buffer formats 0x0006 (direct + indirect).
func rejBytes(reason uint32, tag uint64) []byte {
	b := make([]byte, 32)
	b[0] = 0xC2
	b[4], b[5], b[6], b[7] = byte(reason>>24), byte(reason>>16), byte(reason>>8), byte(reason)
	for i := 0; i < 8; i++ {
		b[8+i] = byte(tag >> (56 - 8*i))
	}
	b[25] = 0x06
	return b
}

func TestLoginResponseBytes(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cfg := h.cfg()
	cfg.LoginTag = 0x1122334455667788
	ch := h.login(cfg)
	want := []byte{
		0xC0, 0, 0, 0, // opcode, reserved
		0x00, 0x00, 0x00, 0x80, // REQUEST LIMIT DELTA 128
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // TAG echoed
		0x00, 0x00, 0x20, 0x54, // MAX IT IU LENGTH 8276
		0x00, 0x00, 0x01, 0x00, // MAX TI IU LENGTH 256
		0x00, 0x06, // direct + indirect
		0x80, // IMMED supported, no existing channels
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	}
	require.Len(t, want, iu.LoginRspSize)
	// The CM delivers the REP's private data zero-padded to its full size.
	got := ch.LoginResponseIU()
	require.Equal(t, want, got[:iu.LoginRspSize])
	require.Equal(t, make([]byte, len(got)-iu.LoginRspSize), got[iu.LoginRspSize:])
	require.True(t, ch.ImmediateData())

	testutil.WaitFor(t, "the login log line", func() bool { _, ok := h.logged("login accepted"); return ok })
	e, _ := h.logged("login accepted")
	fields := e.ContextMap()
	require.Equal(t, int64(8260), int64(fields["req_it_iu_len"].(uint32)))
	require.Equal(t, true, fields["immediate_data"])
	require.Equal(t, uint16(68), fields["immediate_data_offset"])
	require.Equal(t, int64(1), fields["channels"])
	require.Equal(t, testPortID.String(), e.ContextMap()["target_port"])
}

// TestLoginRejects checks every reject reason end to end: the SRP_LOGIN_REJ bytes the
// initiator receives and the log line telling the operator what to change.
func TestLoginRejects(t *testing.T) {
	otherPort := testPortID
	otherPort[15] ^= 0xFF
	refuser := srp.AuthorizerFunc(func(ini, tgt iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
		return nil, srp.ErrNotAuthorized
	})
	custom := srp.AuthorizerFunc(func(ini, tgt iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
		return nil, &srp.LoginRefusedError{Reason: iu.LoginRejMultiChannelUnsupported, Detail: "policy says one channel"}
	})
	cases := []struct {
		name   string
		acl    bool // refused by the Authorizer: counted as RejectedByACL, not by reason
		auth   srp.Authorizer
		limits srp.Limits
		cfg    func(*srptest.Config)
		reason iu.LoginRejReason
		log    []string // substrings of the reject log's detail and fix
	}{
		{
			name:   "wrong target port",
			cfg:    func(c *srptest.Config) { c.TargetPortID = otherPort },
			reason: iu.LoginRejUnableAssociateChannel,
			log:    []string{"ioc_guid=0002c90300a3428f", "use id_ext=0002c90300a34270,ioc_guid=0002c90300a34270"},
		},
		{
			name:   "IT IU length too large",
			cfg:    func(c *srptest.Config) { c.ITIULen = 16484 },
			reason: iu.LoginRejReqITIULengthTooLarge,
			log:    []string{"initiator asked it_iu_len 16484 > max_it_iu_len 8276", "raise limits.max_it_iu_len", "max_it_iu_size=8276"},
		},
		{
			name:   "IT IU length below 64",
			cfg:    func(c *srptest.Config) { c.ITIULen = 63 },
			reason: iu.LoginRejReqITIULengthTooLarge,
			log:    []string{"it_iu_len 63 < 64"},
		},
		{
			name:   "small target limit rejects Linux's immediate-data login",
			limits: srp.Limits{MaxITIULen: 4148},
			reason: iu.LoginRejReqITIULengthTooLarge,
			log:    []string{"8260 > max_it_iu_len 4148"},
		},
		{
			name:   "unsupported buffer format",
			cfg:    func(c *srptest.Config) { c.ReqBufFmt = iu.BufFormatDirect | iu.BufFormatIndirect | 0x0100 },
			reason: iu.LoginRejUnsupportedDescriptorFmt,
			log:    []string{"requires buffer formats 0x0106"},
		},
		{
			name:   "reserved multi-channel action",
			cfg:    func(c *srptest.Config) { c.MultiChannel = 2 },
			reason: iu.LoginRejUnableEstablishChannel,
			log:    []string{"reserved MULTI-CHANNEL ACTION 2"},
		},
		{
			name:   "ACL refusal",
			acl:    true,
			auth:   refuser,
			reason: iu.LoginRejChannelLimitReached,
			log:    []string{"initiator not authorized", "add initiator port 0x"},
		},
		{
			name:   "ACL refusal with its own reason",
			acl:    true,
			auth:   custom,
			reason: iu.LoginRejMultiChannelUnsupported,
			log:    []string{"policy says one channel"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{auth: tc.auth, limits: tc.limits})
			cfg := h.cfg()
			cfg.LoginTag = 0x0102030405060708
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			_, err := h.loginErr(cfg)
			var rej *srptest.LoginRejectedError
			require.ErrorAs(t, err, &rej)
			require.Equal(t, memfabric.RejectConsumerDefined, rej.CMReason)
			requireRej(t, rej.Raw, uint32(tc.reason), 0x0102030405060708)
			e, ok := h.logged("login rejected")
			require.True(t, ok)
			m := e.ContextMap()
			require.Equal(t, tc.reason.String(), m["reason"])
			text := m["detail"].(string) + " | " + m["fix"].(string)
			for _, s := range tc.log {
				require.Contains(t, text, s)
			}
			st := h.tgt.Stats()
			require.Equal(t, uint64(1), st.LoginsRejected)
			if tc.acl {
				require.Equal(t, uint64(1), st.RejectedByACL)
				require.Equal(t, [7]uint64{}, st.Rejects, "an ACL refusal is not counted under its wire reason")
			} else {
				require.Zero(t, st.RejectedByACL)
				require.Equal(t, uint64(1), st.Rejects[uint32(tc.reason)-0x00010000])
			}
		})
	}
}

func TestLoginChannelLimit(t *testing.T) {
	h := newHarness(t, harnessOpts{limits: srp.Limits{MaxChannels: 2}})
	chs := h.loginMulti(h.cfg(), 2)
	cfg := h.cfg()
	cfg.Node = chs[0].Node()
	cfg.MultiChannel = iu.MultiChanMulti
	cfg.ChannelIndex = 2
	_, err := h.loginErr(cfg)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	requireRej(t, rej.Raw, 0x00010006, 0)
	e, ok := h.logged("login rejected")
	require.True(t, ok)
	require.Contains(t, e.ContextMap()["detail"], "already has 2 channels")
	require.Contains(t, e.ContextMap()["fix"], "ch_count=2")
}

// TestLoginMalformed sends private data that is no SRP_LOGIN_REQ (the CM pads it to 56 bytes,
// so only the opcode can be wrong).
func TestLoginMalformed(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ini, err := h.fab.NewNode(netip.MustParseAddr("198.51.100.7"))
	require.NoError(t, err)
	good, err := srptest.LoginRequest(h.cfg())
	require.NoError(t, err)
	wrongOp := append([]byte(nil), good...)
	wrongOp[11] = 0x02 // SRP_CMD where SRP_LOGIN_REQ belongs (byte 11 of the RDMA/CM form)
	garbage := make([]byte, 20)
	for i := range garbage {
		garbage[i] = 0xFF
	}
	for _, priv := range [][]byte{wrongOp, garbage} {
		_, err := ini.Connect(ctxT(t), h.addr, priv, memfabric.ConnectParams{
			QP:                 ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1},
			RNRRetryCount:      7,
			ResponderResources: 4,
		})
		var re *memfabric.RejectedError
		require.ErrorAs(t, err, &re)
		requireRej(t, re.PrivateData, 0x00010000, 0)
	}
	require.Equal(t, uint64(2), h.tgt.Stats().Rejects[0])
}

func TestLoginImmediateDataGrant(t *testing.T) {
	cases := []struct {
		name    string
		limits  srp.Limits
		imm     srptest.Toggle
		offset  uint16
		granted bool
	}{
		{name: "linux default", granted: true},
		{name: "not requested", imm: srptest.Off},
		{name: "disabled on the target", limits: srp.Limits{DisableImmediateData: true}},
		{name: "offset 48 leaves no room for the descriptor", offset: 48},
		{name: "offset 52", offset: 52, granted: true},
		{name: "offset 512", offset: 512, granted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{limits: tc.limits})
			cfg := h.cfg()
			cfg.ImmediateData = tc.imm
			cfg.ImmDataOffset = tc.offset
			ch := h.login(cfg)
			require.Equal(t, tc.granted, ch.LoginResponse().RspFlags&iu.LoginRspImmedSupp != 0)
			clearUA(t, ch, 0)
			// Writes work either way (immediate data or RDMA READ) and read back.
			data := testutil.Pattern(4096, int(tc.offset))
			mustWrite(t, ch, 0, 100, data)
			require.Equal(t, data, mustRead(t, ch, 0, 100, 8))
		})
	}
}

// serveIB listens as an AF_IB id on the harness node's port (raw IB CM REQ private data, the
// 64-byte SRP_LOGIN_REQ first) and serves it; the returned channel receives Serve's error once
// the harness is closed.
func (h *harness) serveIB() <-chan error {
	h.t.Helper()
	ln, err := h.node.ListenIB(testPort)
	require.NoError(h.t, err)
	errc := make(chan error, 1)
	go func() { errc <- h.tgt.Serve(context.Background(), ln) }()
	return errc
}

// TestLoginIBCMForm logs in with the 64-byte IB CM form to an AF_IB listener, as ib_srp's
// dgid= login reaches one, and does I/O in every data layout on the channel.
func TestLoginIBCMForm(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ibErr := h.serveIB()
	cfg := h.cfg()
	cfg.LoginForm = srptest.LoginFormIBCM
	cfg.LoginTag = 0xAABB
	ch := h.login(cfg)
	require.Equal(t, memfabric.PortSpaceIB, ch.Config().PortSpace)
	require.Len(t, ch.LoginRequestIU(), iu.LoginReqSize)
	require.Equal(t, iu.Tag(0xAABB), ch.LoginResponse().Tag)
	require.Equal(t, uint32(128), ch.LoginResponse().ReqLimDelta)
	require.True(t, ch.ImmediateData())
	var e observer.LoggedEntry
	testutil.WaitFor(t, "the login's log line", func() bool { var ok bool; e, ok = h.logged("login accepted"); return ok })
	require.Equal(t, "IB CM (64 bytes, AF_IB)", e.ContextMap()["login_form"])
	require.Equal(t, "gid "+ch.Node().GID().String()+" pkey 0xffff", e.ContextMap()["src"])
	clearUA(t, ch, 0)

	for i, layout := range []srptest.Layout{nil, srptest.Direct{}, srptest.Indirect{N: 3}} {
		data := testutil.Pattern(8192, 40+i)
		lba := uint32(64 * i)
		rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(lba, 16), DataOut: data, Layout: layout})
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		rsp, err = ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(lba, 16), DataInLen: len(data), Layout: layout})
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		require.Equal(t, data, rsp.DataIn, "layout %T", layout)
	}

	// A rejected 64-byte login echoes its tag too.
	cfg.TargetPortID[0] ^= 1
	_, err := h.loginErr(cfg)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	requireRej(t, rej.Raw, 0x00010003, 0xAABB)

	h.close()
	require.ErrorIs(t, <-ibErr, srp.ErrTargetClosed)
}

// paddedListener stands for a transport that delivers private data with the sender's length
// (iWARP's MPA carries up to 512 bytes) from an initiator that sent the 56-byte RDMA/CM login
// followed by zeros up to 92 bytes: by length alone that is the IB CM form.
type paddedListener struct{ ib.Listener }

type paddedRequest struct {
	ib.ConnRequest
	priv []byte
}

func (r *paddedRequest) PrivateData() []byte { return r.priv }

func (l paddedListener) Next(ctx context.Context) (ib.ConnRequest, error) {
	req, err := l.Listener.Next(ctx)
	if err != nil {
		return nil, err
	}
	priv := make([]byte, 92)
	copy(priv, req.PrivateData())
	return &paddedRequest{ConnRequest: req, priv: priv}, nil
}

// ipListener is a paddedListener that says it is of an IP family.
type ipListener struct{ paddedListener }

func (ipListener) Family() ib.Family { return ib.FamilyIP }

// TestLoginFormByFamily: the login layout follows the listener's address family, not the
// length of the private data. A 92-byte RDMA/CM login on an IP-family listener logs in; on a
// listener that does not tell its family the length picks the IB CM layout, which reads the
// wrong bytes as the target port identifier.
func TestLoginFormByFamily(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for _, tc := range []struct {
		name   string
		ln     func(ib.Listener) ib.Listener
		reject uint32
	}{
		{"IP-family listener", func(l ib.Listener) ib.Listener { return ipListener{paddedListener{l}} }, 0},
		{"listener without a family", func(l ib.Listener) ib.Listener { return paddedListener{l} }, 0x00010003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := h.node.Listen(testPort + 1)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- h.tgt.Serve(ctx, tc.ln(ln)) }()
			defer func() {
				cancel()
				require.ErrorIs(t, <-served, context.Canceled)
				require.NoError(t, ln.Close())
			}()
			cfg := h.cfg()
			cfg.Addr = ln.Addr()
			ch, err := h.loginErr(cfg)
			if tc.reject == 0 {
				require.NoError(t, err)
				clearUA(t, ch, 0)
				require.NoError(t, ch.Close())
				return
			}
			var rej *srptest.LoginRejectedError
			require.ErrorAs(t, err, &rej)
			require.Equal(t, iu.LoginRejReason(tc.reject), rej.Reason)
		})
	}
}

// TestMultiChannel checks the MULTI-CHANNEL ACTION handling: single with no channel (result
// 0), multi joining (2), single again terminating the others (1) whose initiators are
// disconnected, and the nexus reset that goes with it.
func TestMultiChannel(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	chs := h.loginMulti(h.cfg(), 3)
	require.Equal(t, iu.LoginRspMultiChanNoChan, chs[0].LoginResponse().RspFlags.MultiChanResult())
	require.Equal(t, iu.LoginRspMultiChanMaintained, chs[1].LoginResponse().RspFlags.MultiChanResult())
	require.Equal(t, iu.LoginRspMultiChanMaintained, chs[2].LoginResponse().RspFlags.MultiChanResult())
	for _, ch := range chs {
		require.Equal(t, uint32(256), ch.LoginResponse().MaxTIIULen)
	}
	clearUA(t, chs[1], 0)
	testutil.WaitFor(t, "3 channels in the session", func() bool {
		s := h.tgt.Sessions()
		return len(s) == 1 && s[0].Channels == 3
	})

	// Channel 2 logs in again with single: the others are terminated.
	cfg := h.cfg()
	cfg.Node = chs[0].Node()
	again := h.login(cfg)
	require.Equal(t, iu.LoginRspMultiChanTerminated, again.LoginResponse().RspFlags.MultiChanResult())
	require.Equal(t, uint32(256), again.LoginResponse().MaxTIIULen, "MAX TI IU LENGTH must not change across relogins")
	for _, ch := range chs {
		select {
		case <-ch.Disconnected():
		case <-time.After(10 * time.Second):
			t.Fatal("old channel not disconnected")
		}
		require.ErrorIs(t, ch.Err(), srptest.ErrDisconnected)
		msg, err := ch.NextUnsolicited(ctxT(t))
		require.NoError(t, err)
		f, err := iu.Parse[iu.TLogout](msg)
		require.NoError(t, err)
		require.Equal(t, iu.TLogoutMultiChannelAction, f.Reason)
	}
	testutil.WaitFor(t, "1 channel in the session", func() bool {
		s := h.tgt.Sessions()
		return len(s) == 1 && s[0].Channels == 1
	})
	// The nexus was reset: I_T NEXUS LOSS OCCURRED is pending.
	requireTURSense(t, again, 0, []uint8{0x06, 0x29, 0x07})
}

// TestLoginRefusedAfterShutdown: a target that shut down answers nothing any more (the
// listener is closed), and Serve refuses to start.
func TestServeAfterShutdown(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.close()
	ln, err := memfabric.New(memfabric.Options{}).NewNode(netip.MustParseAddr("192.0.2.9"))
	require.NoError(t, err)
	l, err := ln.Listen(1)
	require.NoError(t, err)
	defer l.Close()
	require.ErrorIs(t, h.tgt.Serve(context.Background(), l), srp.ErrTargetClosed)
}

// TestServeTwoListeners: one target serves several listeners (ports, or devices).
func TestServeTwoListeners(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ln2, err := h.node.Listen(testPort + 1)
	require.NoError(t, err)
	errs := make(chan error, 1)
	go func() { errs <- h.tgt.Serve(context.Background(), ln2) }()
	ch1 := h.login(h.cfg())
	cfg := h.cfg()
	cfg.Addr = ln2.Addr()
	cfg.InitiatorPortID = iu.PortID{15: 2}
	ch2 := h.login(cfg)
	for _, ch := range []*srptest.Channel{ch1, ch2} {
		clearUA(t, ch, 0)
	}
	h.close()
	require.ErrorIs(t, <-errs, srp.ErrTargetClosed)
}
