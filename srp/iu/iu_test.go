package iu_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

// Values used throughout the layout tests. Every field gets distinct, non-zero bytes so that a
// field written at the wrong offset or with the wrong width shows up in the byte comparison.
const (
	testTag     iu.Tag = 0x0102030405060708
	testTaskTag iu.Tag = 0x1112131415161718
	testLUN     uint64 = 0x4142434445464748
)

var (
	testInitiator = iu.PortID{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}
	testTarget    = iu.PortID{0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f}
)

// ffBuf returns n bytes of 0xFF, so that any byte an encoder forgets to write (reserved bytes
// in particular) differs from the expected zero.
func ffBuf(n int) []byte { return bytes.Repeat([]byte{0xFF}, n) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// named is one constant of an enumeration: the value the standard gives it and what its String
// method prints.
type named[E ~uint8 | ~uint32] struct {
	c    E
	val  uint32
	name string
}

// checkNames checks the value and the String of every constant in cases.
func checkNames[E interface {
	~uint8 | ~uint32
	String() string
}](t *testing.T, cases []named[E]) {
	t.Helper()
	for _, tc := range cases {
		require.Equal(t, tc.val, uint32(tc.c), tc.name)
		require.Equal(t, tc.name, tc.c.String())
	}
}

// fixedIU is the contract of an IU of fixed size: a view that validates, decodes and encodes,
// the encoder taking a buffer of at least the IU's size and so never failing.
type fixedIU[F any] interface {
	iu.View[F]
	Encode(*F) int
}

// varIU is the contract of an IU whose length depends on its content (SRP_RSP, SRP_AER_REQ):
// its encoder reports a buffer too short for the content with ErrShort.
type varIU[F any] interface {
	iu.View[F]
	Encode(*F) (int, error)
}

func encFixed[V fixedIU[F], F any](b []byte, f *F) (int, error) { return V(b).Encode(f), nil }
func encVar[V varIU[F], F any](b []byte, f *F) (int, error)     { return V(b).Encode(f) }

// checkLayout checks a fixed-size IU V against its bytes (see checkBytes); encoding into a
// buffer one byte short panics, as encoding/binary's Put functions do.
func checkLayout[V fixedIU[F], F any](t *testing.T, want []byte, in F, opAt int) {
	t.Helper()
	checkBytes(t, want, in, opAt, encFixed[V, F], iu.Parse[V, F], iu.ErrShort)
	require.Panics(t, func() { V(ffBuf(len(want) - 1)).Encode(&in) }, "encoding into a buffer one byte short")
}

// checkLayoutVar checks a variable-size IU V against its bytes (see checkBytes); encoding into
// a buffer one byte short is ErrShort and writes nothing.
func checkLayoutVar[V varIU[F], F any](t *testing.T, want []byte, in F, truncErr error) {
	t.Helper()
	checkBytes(t, want, in, 0, encVar[V, F], iu.Parse[V, F], truncErr)
	short := ffBuf(len(want) - 1)
	_, err := V(short).Encode(&in)
	require.ErrorIs(t, err, iu.ErrShort, "encoding into a buffer one byte short")
	require.Equal(t, ffBuf(len(want)-1), short, "nothing written on error")
}

// checkBytes encodes in into a 0xFF-filled buffer 8 bytes larger than the IU and compares the
// full output with want; checks that nothing past the IU was written; decodes the output and
// compares with in; and checks the decoder's errors on short input (truncErr for want less its
// last byte) and on a wrong opcode at opAt.
func checkBytes[F any](t *testing.T, want []byte, in F, opAt int,
	encode func([]byte, *F) (int, error), decode func([]byte) (F, error), truncErr error,
) {
	t.Helper()
	buf := ffBuf(len(want) + 8)
	n, err := encode(buf, &in)
	require.NoError(t, err)
	require.Equal(t, len(want), n, "encoded length")
	require.Equal(t, want, buf[:n], "encoded bytes")
	require.Equal(t, ffBuf(8), buf[n:], "bytes past the IU must be untouched")

	got, err := decode(buf[:n])
	require.NoError(t, err)
	require.Equal(t, in, got, "decode(encode(x)) != x")

	_, err = decode(want[:len(want)-1])
	require.ErrorIs(t, err, truncErr, "decoding an IU one byte short")
	_, err = decode(nil)
	require.ErrorIs(t, err, iu.ErrShort, "decoding nothing")

	bad := bytes.Clone(want)
	bad[opAt] ^= 0x40
	_, err = decode(bad)
	require.ErrorIs(t, err, iu.ErrOpcode, "decoding with a wrong opcode")
}

func TestLoginReqIBLayout(t *testing.T) {
	// struct srp_login_req (include/scsi/srp.h): opcode, reserved1[7], tag, req_it_iu_len,
	// reserved2[4], req_buf_fmt, req_flags, reserved3[1], imm_data_offset, reserved4[2],
	// initiator_port_id[16], target_port_id[16].
	want := cat(
		[]byte{0x00, 0, 0, 0, 0, 0, 0, 0}, // opcode SRP_LOGIN_REQ, reserved1
		[]byte{1, 2, 3, 4, 5, 6, 7, 8},    // tag
		[]byte{0x00, 0x00, 0x20, 0x44},    // req_it_iu_len = 8260
		[]byte{0, 0, 0, 0},                // reserved2
		[]byte{0x00, 0x06},                // req_buf_fmt = DIRECT | INDIRECT
		[]byte{0x81},                      // req_flags = MULTICHAN_MULTI | IMMED_REQUESTED
		[]byte{0},                         // reserved3
		[]byte{0x00, 0x44},                // imm_data_offset = 68
		[]byte{0, 0},                      // reserved4
		testInitiator[:],
		testTarget[:],
	)
	require.Len(t, want, iu.LoginReqSize)
	checkLayout[iu.LoginReq](t, want, testLoginReqFields(), 0)

	// The generic decoder picks the IB CM form for 64 bytes and for the 92 bytes of IB CM REQ
	// private data (zero padded).
	for _, b := range [][]byte{want, cat(want, make([]byte, 28))} {
		got, err := iu.ParseLoginReq(b)
		require.NoError(t, err)
		require.Equal(t, testLoginReqFields(), got)
	}
}

func TestLoginReqRDMALayout(t *testing.T) {
	// struct srp_login_req_rdma (include/scsi/srp.h): tag, req_buf_fmt, req_flags, opcode,
	// req_it_iu_len, initiator_port_id[16], target_port_id[16], imm_data_offset, reserved[6].
	want := cat(
		[]byte{1, 2, 3, 4, 5, 6, 7, 8}, // tag
		[]byte{0x00, 0x06},             // req_buf_fmt
		[]byte{0x81},                   // req_flags
		[]byte{0x00},                   // opcode SRP_LOGIN_REQ
		[]byte{0x00, 0x00, 0x20, 0x44}, // req_it_iu_len = 8260
		testInitiator[:],
		testTarget[:],
		[]byte{0x00, 0x44},       // imm_data_offset = 68
		[]byte{0, 0, 0, 0, 0, 0}, // reserved
	)
	require.Len(t, want, iu.LoginReqRDMASize)
	checkLayout[iu.LoginReqRDMA](t, want, testLoginReqFields(), 11)

	got, err := iu.ParseLoginReq(want)
	require.NoError(t, err)
	require.Equal(t, testLoginReqFields(), got)
}

func testLoginReqFields() iu.LoginReqFields {
	return iu.LoginReqFields{
		Tag:             testTag,
		ReqITIULen:      8260,
		ReqBufFmt:       iu.BufFormatDirect | iu.BufFormatIndirect,
		ReqFlags:        iu.MultiChanMulti | iu.ImmedRequested,
		ImmDataOffset:   68,
		InitiatorPortID: testInitiator,
		TargetPortID:    testTarget,
	}
}

func TestParseLoginReqLengths(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want error
	}{
		{0, iu.ErrShort},
		{55, iu.ErrShort},
		{57, iu.ErrInconsistent},
		{63, iu.ErrInconsistent},
	} {
		_, err := iu.ParseLoginReq(make([]byte, tc.n))
		require.ErrorIs(t, err, tc.want, "length %d", tc.n)
	}
	// A 64-byte buffer whose byte 0 is not SRP_LOGIN_REQ is rejected even though byte 11
	// (the RDMA/CM opcode position) is zero.
	b := make([]byte, 64)
	b[0] = byte(iu.OpCmd)
	_, err := iu.ParseLoginReq(b)
	require.ErrorIs(t, err, iu.ErrOpcode)
}

func TestLoginRspLayout(t *testing.T) {
	// struct srp_login_rsp: opcode, reserved1[3], req_lim_delta, tag, max_it_iu_len,
	// max_ti_iu_len, buf_fmt, rsp_flags, reserved2[25] (packed, 52 bytes).
	want := cat(
		[]byte{0xC0, 0, 0, 0},          // opcode SRP_LOGIN_RSP, reserved1
		[]byte{0x00, 0x00, 0x00, 0x80}, // req_lim_delta = 128
		[]byte{1, 2, 3, 4, 5, 6, 7, 8}, // tag
		[]byte{0x00, 0x00, 0x20, 0x54}, // max_it_iu_len = 8276
		[]byte{0x00, 0x00, 0x20, 0x44}, // max_ti_iu_len = 8260
		[]byte{0x00, 0x06},             // buf_fmt
		[]byte{0x82},                   // rsp_flags = MULTICHAN_MAINTAINED | IMMED_SUPP
		make([]byte, 25),               // reserved2
	)
	require.Len(t, want, iu.LoginRspSize)
	in := iu.LoginRspFields{
		ReqLimDelta: 128,
		Tag:         testTag,
		MaxITIULen:  8276,
		MaxTIIULen:  8260,
		SupBufFmt:   iu.BufFormatDirect | iu.BufFormatIndirect,
		RspFlags:    iu.LoginRspMultiChanMaintained | iu.LoginRspImmedSupp,
	}
	checkLayout[iu.LoginRsp](t, want, in, 0)
	require.Equal(t, iu.LoginRspMultiChanMaintained, iu.LoginRsp(want).RspFlags().MultiChanResult())
}

func TestLoginRejLayout(t *testing.T) {
	// struct srp_login_rej: opcode, reserved1[3], reason, tag, reserved2[8], buf_fmt,
	// reserved3[6].
	want := cat(
		[]byte{0xC2, 0, 0, 0},          // opcode SRP_LOGIN_REJ, reserved1
		[]byte{0x00, 0x01, 0x00, 0x02}, // reason = REQ_IT_IU_LENGTH_TOO_LARGE
		[]byte{1, 2, 3, 4, 5, 6, 7, 8}, // tag
		make([]byte, 8),                // reserved2
		[]byte{0x00, 0x06},             // buf_fmt
		make([]byte, 6),                // reserved3
	)
	require.Len(t, want, iu.LoginRejSize)
	in := iu.LoginRejFields{
		Reason:    iu.LoginRejReqITIULengthTooLarge,
		Tag:       testTag,
		SupBufFmt: iu.BufFormatDirect | iu.BufFormatIndirect,
	}
	checkLayout[iu.LoginRej](t, want, in, 0)
}

func TestLoginRejReasons(t *testing.T) {
	// enum srp_login_rej_reason; String adds the meaning and the number ib_srp prints.
	checkNames(t, []named[iu.LoginRejReason]{
		{iu.LoginRejUnableEstablishChannel, 0x00010000, "SRP_LOGIN_REJ_UNABLE_ESTABLISH_CHANNEL (unable to establish RDMA channel, no reason specified, 0x00010000)"},
		{iu.LoginRejInsufficientResources, 0x00010001, "SRP_LOGIN_REJ_INSUFFICIENT_RESOURCES (insufficient RDMA channel resources, 0x00010001)"},
		{iu.LoginRejReqITIULengthTooLarge, 0x00010002, "SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE (requested maximum initiator to target IU length too large, 0x00010002)"},
		{iu.LoginRejUnableAssociateChannel, 0x00010003, "SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL (unable to associate RDMA channel with specified I_T nexus, 0x00010003)"},
		{iu.LoginRejUnsupportedDescriptorFmt, 0x00010004, "SRP_LOGIN_REJ_UNSUPPORTED_DESCRIPTOR_FMT (requested data buffer descriptor format not supported, 0x00010004)"},
		{iu.LoginRejMultiChannelUnsupported, 0x00010005, "SRP_LOGIN_REJ_MULTI_CHANNEL_UNSUPPORTED (multiple RDMA channels per I_T nexus not supported, 0x00010005)"},
		{iu.LoginRejChannelLimitReached, 0x00010006, "SRP_LOGIN_REJ_CHANNEL_LIMIT_REACHED (RDMA channel limit reached for this initiator, 0x00010006)"},
		{0x00010007, 0x00010007, "SRP_LOGIN_REJ reason 0x00010007"},
	})
}

func TestOpcodes(t *testing.T) {
	// The enum at the top of include/scsi/srp.h.
	checkNames(t, []named[iu.Opcode]{
		{iu.OpLoginReq, 0x00, "SRP_LOGIN_REQ"},
		{iu.OpTskMgmt, 0x01, "SRP_TSK_MGMT"},
		{iu.OpCmd, 0x02, "SRP_CMD"},
		{iu.OpILogout, 0x03, "SRP_I_LOGOUT"},
		{iu.OpLoginRsp, 0xC0, "SRP_LOGIN_RSP"},
		{iu.OpRsp, 0xC1, "SRP_RSP"},
		{iu.OpLoginRej, 0xC2, "SRP_LOGIN_REJ"},
		{iu.OpTLogout, 0x80, "SRP_T_LOGOUT"},
		{iu.OpCredReq, 0x81, "SRP_CRED_REQ"},
		{iu.OpAerReq, 0x82, "SRP_AER_REQ"},
		{iu.OpCredRsp, 0x41, "SRP_CRED_RSP"},
		{iu.OpAerRsp, 0x42, "SRP_AER_RSP"},
		{4, 4, "SRP opcode 0x04"},
	})
}

func TestPortID(t *testing.T) {
	require.Equal(t, uint64(0x1011121314151617), testInitiator.IDExt())
	require.Equal(t, uint64(0x18191a1b1c1d1e1f), testInitiator.GUID())
	require.Equal(t, "0x101112131415161718191a1b1c1d1e1f", testInitiator.String())
}

func TestILogoutLayout(t *testing.T) {
	// struct srp_i_logout: opcode, reserved[7], tag.
	want := cat([]byte{0x03, 0, 0, 0, 0, 0, 0, 0}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	checkLayout[iu.ILogout](t, want, iu.ILogoutFields{Tag: testTag}, 0)
}

func TestTLogoutLayout(t *testing.T) {
	// struct srp_t_logout: opcode, sol_not, reserved[2], reason, tag.
	want := cat(
		[]byte{0x80, 0x01, 0, 0},       // opcode SRP_T_LOGOUT, sol_not = SOLNT, reserved
		[]byte{0x00, 0x00, 0x00, 0x07}, // reason = unsupported data-in format
		[]byte{1, 2, 3, 4, 5, 6, 7, 8}, // tag
	)
	in := iu.TLogoutFields{SolNot: iu.SOLNT, Reason: iu.TLogoutUnsupportedDataInFormat, Tag: testTag}
	checkLayout[iu.TLogout](t, want, in, 0)

	checkNames(t, []named[iu.TLogoutReason]{
		{iu.TLogoutNoReason, 0, "no reason specified"},
		{iu.TLogoutInactive, 1, "inactive RDMA channel"},
		{iu.TLogoutInvalidIUType, 2, "invalid IU type"},
		{iu.TLogoutUnexpectedInitiatorRsp, 3, "initiator response without request"},
		{iu.TLogoutMultiChannelAction, 4, "multi-channel action of a new login"},
		{iu.TLogoutUnsupportedDataOutFormat, 6, "unsupported data-out descriptor format"},
		{iu.TLogoutUnsupportedDataInFormat, 7, "unsupported data-in descriptor format"},
		{iu.TLogoutInvalidIULength, 8, "invalid IU length"},
		{5, 5, "SRP_T_LOGOUT reason 5"},
	})
}

func TestTskMgmtLayout(t *testing.T) {
	// struct srp_tsk_mgmt: opcode, sol_not, reserved1[6], tag, reserved2[4], lun,
	// reserved3[2], tsk_mgmt_func, reserved4, task_tag, reserved5[8].
	want := cat(
		[]byte{0x01, 0x06, 0, 0, 0, 0, 0, 0},                   // opcode SRP_TSK_MGMT, SCSOLNT|UCSOLNT, reserved1
		[]byte{1, 2, 3, 4, 5, 6, 7, 8},                         // tag
		[]byte{0, 0, 0, 0},                                     // reserved2
		[]byte{0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48}, // lun
		[]byte{0, 0}, // reserved3
		[]byte{0x01}, // tsk_mgmt_func = ABORT TASK
		[]byte{0},    // reserved4
		[]byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}, // task_tag
		make([]byte, 8), // reserved5
	)
	require.Len(t, want, iu.TskMgmtSize)
	in := iu.TskMgmtFields{
		SolNot:  iu.SCSOLNT | iu.UCSOLNT,
		Tag:     testTag,
		LUN:     testLUN,
		Func:    iu.TskAbortTask,
		TaskTag: testTaskTag,
	}
	checkLayout[iu.TskMgmt](t, want, in, 0)
}

func TestTskMgmtCodes(t *testing.T) {
	// SRP_TSK_* from include/scsi/srp.h; response codes from SRP r16a table 24 (LIO, illumos).
	checkNames(t, []named[iu.TskMgmtFunc]{
		{iu.TskAbortTask, 0x01, "ABORT TASK"},
		{iu.TskAbortTaskSet, 0x02, "ABORT TASK SET"},
		{iu.TskClearTaskSet, 0x04, "CLEAR TASK SET"},
		{iu.TskLUNReset, 0x08, "LOGICAL UNIT RESET"},
		{iu.TskClearACA, 0x40, "CLEAR ACA"},
		{0x80, 0x80, "task management function 0x80"},
	})
	require.Equal(t, [4]byte{0, 0, 0, 0x00}, iu.TskMgmtSuccess.ResponseData())
	require.Equal(t, [4]byte{0, 0, 0, 0x02}, iu.TskMgmtReqInvalid.ResponseData())
	require.Equal(t, [4]byte{0, 0, 0, 0x04}, iu.TskMgmtFuncNotSupp.ResponseData())
	require.Equal(t, [4]byte{0, 0, 0, 0x05}, iu.TskMgmtFailed.ResponseData())
}

func TestRspLayout(t *testing.T) {
	sense := []byte{0x70, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x0a, 0, 0, 0, 0, 0x24, 0x00, 0, 0, 0, 0}
	tmData := iu.TskMgmtFuncNotSupp.ResponseData()
	for _, tc := range []struct {
		name string
		in   iu.RspFields
		want []byte
	}{
		{
			// struct srp_rsp: opcode, sol_not, reserved1[2], req_lim_delta, tag,
			// reserved2[2], flags, status, data_out_res_cnt, data_in_res_cnt,
			// sense_data_len, resp_data_len, data[] (packed, 36 bytes + data).
			name: "check condition with sense and data-in underflow",
			in: iu.RspFields{
				SolNot: iu.SOLNT, ReqLimDelta: 3, Tag: testTag, Flags: iu.DIUNDER,
				Status: 0x02, DataOutResCnt: 0x0A0B0C0D, DataInResCnt: 512, SenseData: sense,
			},
			want: cat(
				[]byte{0xC1, 0x01, 0, 0},       // opcode SRP_RSP, sol_not, reserved1
				[]byte{0x00, 0x00, 0x00, 0x03}, // req_lim_delta
				[]byte{1, 2, 3, 4, 5, 6, 7, 8}, // tag
				[]byte{0, 0},                   // reserved2
				[]byte{0x22},                   // flags = SNSVALID | DIUNDER
				[]byte{0x02},                   // status = CHECK CONDITION
				[]byte{0x0A, 0x0B, 0x0C, 0x0D}, // data_out_res_cnt
				[]byte{0x00, 0x00, 0x02, 0x00}, // data_in_res_cnt = 512
				[]byte{0x00, 0x00, 0x00, 0x12}, // sense_data_len = 18
				[]byte{0x00, 0x00, 0x00, 0x00}, // resp_data_len
				sense,
			),
		},
		{
			name: "task management response",
			in:   iu.RspFields{ReqLimDelta: 1, Tag: testTaskTag, RespData: tmData[:]},
			want: cat(
				[]byte{0xC1, 0x00, 0, 0},
				[]byte{0x00, 0x00, 0x00, 0x01},
				[]byte{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18},
				[]byte{0, 0},
				[]byte{0x01}, // flags = RSPVALID
				[]byte{0x00},
				make([]byte, 8),                // residual counts
				[]byte{0x00, 0x00, 0x00, 0x00}, // sense_data_len
				[]byte{0x00, 0x00, 0x00, 0x04}, // resp_data_len
				[]byte{0, 0, 0, 0x04},          // response data: FUNCTION NOT SUPPORTED
			),
		},
		{
			name: "response data then sense data",
			in: iu.RspFields{
				ReqLimDelta: 0x01020304, Tag: testTag, Flags: iu.DOOVER | iu.DOUNDER | iu.DIOVER,
				Status: 0x08, RespData: []byte{0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8},
				SenseData: []byte{0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0},
			},
			want: cat(
				[]byte{0xC1, 0x00, 0, 0},
				[]byte{0x01, 0x02, 0x03, 0x04},
				[]byte{1, 2, 3, 4, 5, 6, 7, 8},
				[]byte{0, 0},
				[]byte{0x1F}, // RSPVALID | SNSVALID | DOOVER | DOUNDER | DIOVER
				[]byte{0x08},
				make([]byte, 8),
				[]byte{0x00, 0x00, 0x00, 0x08}, // sense_data_len
				[]byte{0x00, 0x00, 0x00, 0x08}, // resp_data_len
				[]byte{0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8},
				[]byte{0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0},
			),
		},
		{
			name: "good status, nothing else",
			in:   iu.RspFields{ReqLimDelta: 1, Tag: testTag},
			want: cat(
				[]byte{0xC1, 0x00, 0, 0},
				[]byte{0x00, 0x00, 0x00, 0x01},
				[]byte{1, 2, 3, 4, 5, 6, 7, 8},
				make([]byte, 20),
			),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Encode derives RSPVALID and SNSVALID; the fields decoded back carry them.
			in := tc.in
			want := tc.in
			if len(in.RespData) > 0 {
				want.Flags |= iu.RSPVALID
			}
			if len(in.SenseData) > 0 {
				want.Flags |= iu.SNSVALID
			}
			require.Equal(t, len(tc.want), iu.RspLen(&in))
			checkLayoutVar[iu.Rsp](t, tc.want, want, truncErrFor(tc.want, iu.RspMinSize))

			// RSPVALID and SNSVALID follow the presence of data, whatever the caller set.
			for _, flags := range []iu.RspFlags{0, iu.RSPVALID | iu.SNSVALID} {
				in.Flags = tc.in.Flags | flags
				buf := ffBuf(len(tc.want))
				_, err := iu.Rsp(buf).Encode(&in)
				require.NoError(t, err)
				require.Equal(t, tc.want, buf)
			}

			r := iu.Rsp(tc.want)
			require.NoError(t, r.Validate())
			require.Equal(t, len(tc.in.RespData), len(r.RespData()))
			require.Equal(t, len(tc.in.SenseData), len(r.SenseData()))
		})
	}
}

// truncErrFor is the error expected from decoding want without its last byte: the fixed part
// is short, or the lengths it declares run past the end.
func truncErrFor(want []byte, min int) error {
	if len(want)-1 < min {
		return iu.ErrShort
	}
	return iu.ErrInconsistent
}

func TestRspEncodeTskMgmt(t *testing.T) {
	// The SRP_RSP answering an SRP_TSK_MGMT: RSPVALID, 4 bytes of response data with the code
	// in the last byte (SRP r16a table 24), no sense data, whatever b held before.
	buf := ffBuf(iu.TskMgmtRspSize + 8)
	require.Equal(t, iu.TskMgmtRspSize, iu.Rsp(buf).EncodeTskMgmt(0x8000000000000001, 2, iu.TskMgmtFuncNotSupp))
	require.Equal(t, cat(
		[]byte{0xC1, 0, 0, 0, 0, 0, 0, 2}, // opcode SRP_RSP, sol_not, reserved1, req_lim_delta = 2
		[]byte{0x80, 0, 0, 0, 0, 0, 0, 1}, // tag
		[]byte{0, 0, 0x01, 0x00},          // reserved2, flags = RSPVALID, status GOOD
		make([]byte, 8),                   // residual counts
		[]byte{0, 0, 0, 0, 0, 0, 0, 4},    // sense_data_len = 0, resp_data_len = 4
		[]byte{0, 0, 0, 0x04},             // response data: FUNCTION NOT SUPPORTED
		ffBuf(8),                          // untouched
	), buf)
	require.Panics(t, func() { iu.Rsp(ffBuf(iu.TskMgmtRspSize-1)).EncodeTskMgmt(1, 1, iu.TskMgmtSuccess) })
}

func TestRspEncodeStatusMatchesEncode(t *testing.T) {
	// EncodeStatus is Encode without response and sense data, in whole-word stores: the same
	// bytes for every status, flag set and residual, whatever the buffer held before, and
	// nothing written past the 36 bytes.
	for _, tc := range []struct {
		name         string
		tag          iu.Tag
		delta        uint32
		status       uint8
		flags        iu.RspFlags
		doRes, diRes uint32
	}{
		{"GOOD", 0x0102030405060708, 1, 0, 0, 0, 0},
		{"BUSY, all delta bits", 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFF, 0x08, 0, 0, 0},
		{"data-in underflow", 7, 3, 0, iu.DIUNDER, 0, 0x1000},
		{"data-out overflow", 9, 1, 0, iu.DOOVER, 0xFFFFFFFF, 0},
		{"both residuals", 1 << 63, 2, 0x02, iu.DOUNDER | iu.DIOVER, 0x01020304, 0xA0B0C0D0},
		{"RSPVALID and SNSVALID asked for", 5, 1, 0, iu.RSPVALID | iu.SNSVALID | iu.DIUNDER, 0, 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := ffBuf(iu.RspMinSize + 8)
			n, err := iu.Rsp(want).Encode(&iu.RspFields{ReqLimDelta: tc.delta, Tag: tc.tag, Status: tc.status,
				Flags: tc.flags, DataOutResCnt: tc.doRes, DataInResCnt: tc.diRes})
			require.NoError(t, err)
			require.Equal(t, iu.RspMinSize, n)
			got := ffBuf(iu.RspMinSize + 8)
			require.Equal(t, iu.RspMinSize, iu.Rsp(got).EncodeStatus(tc.tag, tc.delta, tc.status, tc.flags, tc.doRes, tc.diRes))
			require.Equal(t, want, got)
			require.NoError(t, iu.Rsp(got[:n]).Validate())
		})
	}
	require.Panics(t, func() { iu.Rsp(ffBuf(iu.RspMinSize-1)).EncodeStatus(1, 1, 0, 0, 0, 0) })
}

func TestRspFlagValues(t *testing.T) {
	// SRP_RSP_FLAG_* from include/scsi/srp.h.
	require.Equal(t, []iu.RspFlags{0x01, 0x02, 0x04, 0x08, 0x10, 0x20},
		[]iu.RspFlags{iu.RSPVALID, iu.SNSVALID, iu.DOOVER, iu.DOUNDER, iu.DIOVER, iu.DIUNDER})
}

func TestRspValidateRejects(t *testing.T) {
	good := func() []byte {
		b := make([]byte, 40)
		_, err := iu.Rsp(b).Encode(&iu.RspFields{Tag: testTag, SenseData: []byte{0x70, 0, 5, 0}})
		require.NoError(t, err)
		return b
	}
	require.NoError(t, iu.Rsp(good()).Validate())

	for _, tc := range []struct {
		name  string
		patch func(b []byte) []byte
		want  error
	}{
		{"SNSVALID clear with sense data", func(b []byte) []byte { b[18] &^= 0x02; return b }, iu.ErrInconsistent},
		{"RSPVALID set without response data", func(b []byte) []byte { b[18] |= 0x01; return b }, iu.ErrInconsistent},
		{"sense length past the end", func(b []byte) []byte { b[31] = 5; return b }, iu.ErrInconsistent},
		{"response length 4 GiB - 1", func(b []byte) []byte {
			b[18] |= 0x01
			copy(b[32:36], []byte{0xFF, 0xFF, 0xFF, 0xFF})
			return b
		}, iu.ErrInconsistent},
		{"header only", func(b []byte) []byte { return b[:35] }, iu.ErrShort},
		{"wrong opcode", func(b []byte) []byte { b[0] = byte(iu.OpCmd); return b }, iu.ErrOpcode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := iu.Parse[iu.Rsp](tc.patch(good()))
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestRspEncodeTooSmall(t *testing.T) {
	// The caller slices the send buffer to the initiator's MAXIMUM TI IU LENGTH: sense data
	// that does not fit is an error, not an oversize SEND.
	buf := ffBuf(64)
	_, err := iu.Rsp(buf[:50]).Encode(&iu.RspFields{SenseData: make([]byte, 18)})
	require.ErrorIs(t, err, iu.ErrShort)
	require.Equal(t, ffBuf(64), buf, "nothing written on error")
}

func TestCredReqLayout(t *testing.T) {
	// struct srp_cred_req: opcode, sol_not, reserved[2], req_lim_delta, tag.
	want := cat(
		[]byte{0x81, 0x01, 0, 0},
		[]byte{0x00, 0x00, 0x01, 0x02}, // req_lim_delta = 258
		[]byte{1, 2, 3, 4, 5, 6, 7, 8},
	)
	checkLayout[iu.CredReq](t, want, iu.CredReqFields{SolNot: iu.SOLNT, ReqLimDelta: 258, Tag: testTag}, 0)
}

func TestCredRspLayout(t *testing.T) {
	// struct srp_cred_rsp: opcode, reserved[7], tag.
	want := cat([]byte{0x41, 0, 0, 0, 0, 0, 0, 0}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	checkLayout[iu.CredRsp](t, want, iu.CredRspFields{Tag: testTag}, 0)
}

func TestAerReqLayout(t *testing.T) {
	sense := []byte{0x70, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x0a, 0, 0, 0, 0, 0x3f, 0x0e}
	// struct srp_aer_req: opcode, sol_not, reserved[2], req_lim_delta, tag, reserved2 (u32),
	// lun, sense_data_len, reserved3 (u32), sense_data[] (packed, 36 bytes + sense).
	want := cat(
		[]byte{0x82, 0x00, 0, 0},
		[]byte{0x00, 0x00, 0x00, 0x01},                         // req_lim_delta
		[]byte{1, 2, 3, 4, 5, 6, 7, 8},                         // tag
		[]byte{0, 0, 0, 0},                                     // reserved2
		[]byte{0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48}, // lun
		[]byte{0x00, 0x00, 0x00, 0x0e},                         // sense_data_len = 14
		[]byte{0, 0, 0, 0},                                     // reserved3
		sense,
	)
	in := iu.AerReqFields{ReqLimDelta: 1, Tag: testTag, LUN: testLUN, SenseData: sense}
	checkLayoutVar[iu.AerReq](t, want, in, iu.ErrInconsistent)
	require.Equal(t, sense, iu.AerReq(want).SenseData())

	// Without sense data it is exactly the 36-byte fixed part.
	want0 := cat(want[:28], []byte{0, 0, 0, 0}, []byte{0, 0, 0, 0})
	checkLayoutVar[iu.AerReq](t, want0, iu.AerReqFields{ReqLimDelta: 1, Tag: testTag, LUN: testLUN}, iu.ErrShort)
}

func TestAerRspLayout(t *testing.T) {
	// struct srp_aer_rsp: opcode, reserved[7], tag.
	want := cat([]byte{0x42, 0, 0, 0, 0, 0, 0, 0}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	checkLayout[iu.AerRsp](t, want, iu.AerRspFields{Tag: testTag}, 0)
}

func TestErrorsCarryContext(t *testing.T) {
	_, err := iu.Parse[iu.TskMgmt](make([]byte, 10))
	require.EqualError(t, err, "srp: SRP_TSK_MGMT of 10 bytes, need 48: srp: IU too short")
	_, err = iu.Parse[iu.CredRsp](cat([]byte{0x42}, make([]byte, 15)))
	require.EqualError(t, err, "srp: opcode SRP_AER_RSP where SRP_CRED_RSP expected: srp: unexpected opcode")
	require.True(t, errors.Is(err, iu.ErrOpcode))
}
