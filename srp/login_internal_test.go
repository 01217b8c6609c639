package srp

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

var unitPort = iu.PortID{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8}

func linuxLogin() iu.LoginReqFields {
	return iu.LoginReqFields{
		Tag:             0,
		ReqITIULen:      8260,
		ReqBufFmt:       iu.BufFormatDirect | iu.BufFormatIndirect,
		ReqFlags:        iu.ImmedRequested,
		ImmDataOffset:   68,
		InitiatorPortID: iu.PortID{15: 1},
		TargetPortID:    unitPort,
	}
}

func TestCheckLogin(t *testing.T) {
	lim := Limits{}.withDefaults()
	cases := []struct {
		name   string
		mod    func(*iu.LoginReqFields)
		reason iu.LoginRejReason // 0: accepted
	}{
		{"linux defaults", func(*iu.LoginReqFields) {}, 0},
		{"exactly the limit", func(f *iu.LoginReqFields) { f.ReqITIULen = 8276 }, 0},
		{"minimum 64", func(f *iu.LoginReqFields) { f.ReqITIULen = 64 }, 0},
		{"multi", func(f *iu.LoginReqFields) { f.ReqFlags |= iu.MultiChanMulti }, 0},
		{"only direct required", func(f *iu.LoginReqFields) { f.ReqBufFmt = iu.BufFormatDirect }, 0},
		{"nothing required", func(f *iu.LoginReqFields) { f.ReqBufFmt = 0 }, 0},
		{"one more than the limit", func(f *iu.LoginReqFields) { f.ReqITIULen = 8277 }, iu.LoginRejReqITIULengthTooLarge},
		{"63", func(f *iu.LoginReqFields) { f.ReqITIULen = 63 }, iu.LoginRejReqITIULengthTooLarge},
		{"id_ext differs", func(f *iu.LoginReqFields) { f.TargetPortID[0] ^= 1 }, iu.LoginRejUnableAssociateChannel},
		{"ioc_guid differs", func(f *iu.LoginReqFields) { f.TargetPortID[15] ^= 1 }, iu.LoginRejUnableAssociateChannel},
		{"target port checked first", func(f *iu.LoginReqFields) { f.TargetPortID[15] ^= 1; f.ReqITIULen = 1 << 20 }, iu.LoginRejUnableAssociateChannel},
		{"unknown buffer format", func(f *iu.LoginReqFields) { f.ReqBufFmt |= 1 }, iu.LoginRejUnsupportedDescriptorFmt},
		{"reserved action 3", func(f *iu.LoginReqFields) { f.ReqFlags |= 3 }, iu.LoginRejUnableEstablishChannel},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := linuxLogin()
			tc.mod(&f)
			le := checkLogin(&f, unitPort, &lim)
			if tc.reason == 0 {
				require.Nil(t, le)
				return
			}
			require.NotNil(t, le)
			require.Equal(t, tc.reason, le.reason)
			require.NotEmpty(t, le.detail)
			require.NotEmpty(t, le.hint)
		})
	}
}

func TestGrantImmediate(t *testing.T) {
	lim := Limits{}.withDefaults()
	for _, tc := range []struct {
		flags iu.LoginReqFlags
		off   uint16
		lim   Limits
		want  uint16
	}{
		{iu.ImmedRequested, 68, lim, 68},
		{0, 68, lim, 0},
		{iu.ImmedRequested, 47, lim, 0},
		{iu.ImmedRequested, 51, lim, 0},
		{iu.ImmedRequested, 52, lim, 52},
		{iu.ImmedRequested, 8275, lim, 8275},
		{iu.ImmedRequested, 8276, lim, 0},
		{iu.ImmedRequested, 68, func() Limits { l := lim; l.DisableImmediateData = true; return l }(), 0},
	} {
		f := linuxLogin()
		f.ReqFlags, f.ImmDataOffset = tc.flags, tc.off
		require.Equal(t, tc.want, grantImmediate(&f, &tc.lim), "flags %#x offset %d", tc.flags, tc.off)
	}
}

// fakeReq is a connection request whose answers are recorded.
type fakeReq struct {
	priv     []byte
	respRes  uint8
	pd       ib.ProtectionDomain
	limits   ib.DeviceLimits
	rejected []byte
	accepted bool
}

func (r *fakeReq) PrivateData() []byte        { return r.priv }
func (r *fakeReq) RemoteAddr() netip.AddrPort { return netip.MustParseAddrPort("198.51.100.1:4000") }
func (r *fakeReq) LocalAddr() netip.AddrPort  { return netip.MustParseAddrPort("192.0.2.1:5555") }
func (r *fakeReq) ResponderResources() uint8  { return r.respRes }
func (r *fakeReq) InitiatorDepth() uint8      { return 0 }
func (r *fakeReq) Limits() ib.DeviceLimits    { return r.limits }
func (r *fakeReq) PD() ib.ProtectionDomain    { return r.pd }
func (r *fakeReq) Reject(b []byte) error      { r.rejected = append([]byte(nil), b...); return nil }
func (r *fakeReq) Accept(ib.AcceptParams) (ib.Conn, error) {
	r.accepted = true
	return nil, errors.New("fake: no connection")
}

// failingPD refuses every registration, as a device out of registrable memory does.
type failingPD struct{}

func (failingPD) RegisterMemory([]byte, ib.Access) (ib.MR, error) {
	return nil, errors.New("ENOMEM: cannot lock memory")
}

var goodLimits = ib.DeviceLimits{MaxQueueDepth: 16384, MaxSendSGE: 32, MaxRecvSGE: 32, MaxReadSGE: 32, MaxInlineData: 256, MaxRDAtomic: 16}

func loginBytes(t *testing.T, f iu.LoginReqFields) []byte {
	b := make([]byte, iu.LoginReqRDMASize)
	iu.LoginReqRDMA(b).Encode(&f)
	return b
}

// TestLoginInsufficientResources covers the rejects that need a failing device: no memory can
// be registered, or the initiator offers no RDMA READ depth. The SRP_LOGIN_REJ bytes are
// written out by hand.
func TestLoginInsufficientResources(t *testing.T) {
	lm, err := scsi.NewLUNMap(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		respRes uint8
		pd      ib.ProtectionDomain
		detail  string
	}{
		{"registration fails", 4, failingPD{}, "ENOMEM: cannot lock memory"},
		{"no responder resources", 0, failingPD{}, "offers no responder resources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			tgt, err := New(Config{TargetPortID: unitPort, Authorizer: AllowAll(lm), Logger: zap.New(core),
				Limits: Limits{BufferPoolSize: 8 << 20}})
			require.NoError(t, err)
			f := linuxLogin()
			f.Tag = 0x0A0B
			req := &fakeReq{priv: loginBytes(t, f), respRes: tc.respRes, pd: tc.pd, limits: goodLimits}
			tgt.login(req, 0)
			require.False(t, req.accepted)
			require.Equal(t, []byte{
				0xC2, 0, 0, 0, 0x00, 0x01, 0x00, 0x01, // opcode, INSUFFICIENT RESOURCES
				0, 0, 0, 0, 0, 0, 0x0A, 0x0B, // tag
				0, 0, 0, 0, 0, 0, 0, 0,
				0x00, 0x06, 0, 0, 0, 0, 0, 0,
			}, req.rejected)
			e := logs.FilterMessage("login rejected").All()
			require.Len(t, e, 1)
			require.Contains(t, e[0].ContextMap()["detail"], tc.detail)
			require.NoError(t, tgt.Shutdown(context.Background()))
		})
	}
}

func TestLimitsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limits
		ok   bool
	}{
		{"defaults", Limits{}, true},
		{"TI IU too small for sense", Limits{MaxTIIULen: 64}, false},
		{"IT IU too small", Limits{MaxITIULen: 64}, false},
		{"pool smaller than a transfer", Limits{BufferPoolSize: 1 << 20}, false},
		{"transfer above 1 GiB", Limits{MaxTransferLen: 1<<30 + 1, BufferPoolSize: 2 << 30}, false},
		{"one credit", Limits{Credits: 1}, false},
		{"small send queue", Limits{SendQueueDepth: 8}, false},
	} {
		_, err := New(Config{Limits: tc.lim})
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
	}
	l := Limits{}.withDefaults()
	require.Equal(t, uint32(8276), l.MaxITIULen)
	require.Equal(t, uint32(256), l.MaxTIIULen)
	require.Equal(t, 128, l.Credits)
	require.Equal(t, uint32(8<<20), l.MaxTransferLen)
	require.Equal(t, 128, l.WorkersPerChannel)
}

// TestParseLoginFamily: the listener's address family decides the layout, whatever the
// length: an IP-family listener means the 56-byte struct srp_login_req_rdma, an AF_IB listener
// the 64-byte struct srp_login_req at offset 0 of the raw 92 bytes (include/scsi/srp.h; the
// bytes below are what ib_srp's srp_send_req builds with its defaults). Without a family the
// length decides.
func TestParseLoginFamily(t *testing.T) {
	f := linuxLogin()
	f.Tag = 0x1122
	// struct srp_login_req: opcode 0, reserved1[7], tag, req_it_iu_len 8260, reserved2[4],
	// req_buf_fmt DIRECT|INDIRECT, req_flags IMMED_REQUESTED, reserved3, imm_data_offset 68,
	// reserved4[2], initiator_port_id, target_port_id; then the REQ's 28 bytes of padding.
	ibForm := cat(
		[]byte{0x00, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0, 0, 0, 0, 0, 0, 0x11, 0x22},
		[]byte{0x00, 0x00, 0x20, 0x44}, []byte{0, 0, 0, 0},
		[]byte{0x00, 0x06, 0x80, 0x00, 0x00, 0x44, 0, 0},
		f.InitiatorPortID[:], unitPort[:],
		make([]byte, 28),
	)
	// struct srp_login_req_rdma: tag, req_buf_fmt, req_flags, opcode, req_it_iu_len,
	// initiator_port_id, target_port_id, imm_data_offset, reserved[6]; then zeros to 92.
	rdma := cat(
		[]byte{0, 0, 0, 0, 0, 0, 0x11, 0x22},
		[]byte{0x00, 0x06, 0x80, 0x00}, []byte{0x00, 0x00, 0x20, 0x44},
		f.InitiatorPortID[:], unitPort[:],
		[]byte{0x00, 0x44}, make([]byte, 6),
		make([]byte, 36),
	)
	require.Len(t, ibForm, ib.MaxIBConnRequestPrivateData)
	require.Len(t, rdma, ib.MaxIBConnRequestPrivateData)
	for _, tc := range []struct {
		name    string
		priv    []byte
		fam     ib.Family
		wantErr bool
	}{
		{"IP listener, 56 bytes", rdma[:56], ib.FamilyIP, false},
		{"IP listener, 92 bytes of RDMA/CM form", rdma, ib.FamilyIP, false},
		{"AF_IB listener, 92 bytes of IB CM form", ibForm, ib.FamilyIB, false},
		{"AF_IB listener, 64 bytes", ibForm[:64], ib.FamilyIB, false},
		{"no family: by length, 56", rdma[:56], 0, false},
		{"no family: by length, 92", ibForm, 0, false},
		{"AF_IB listener, 56 bytes", rdma[:56], ib.FamilyIB, true},
		{"AF_IB listener, RDMA/CM form: byte 0 is the tag", func() []byte { b := bytes.Clone(rdma); b[0] = 1; return b }(), ib.FamilyIB, true},
		{"IP listener, IB CM form: opcode is not at byte 11", func() []byte { b := bytes.Clone(ibForm); b[11] = 0xC0; return b }(), ib.FamilyIP, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLogin(&fakeReq{priv: tc.priv}, tc.fam)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, f, got)
		})
	}
}

func cat(bs ...[]byte) []byte { return slices.Concat(bs...) }
