package srp_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp"
)

// Reserved byte ranges [start, end) per IU, from the struct definitions in
// include/scsi/srp.h. A decoder ignores them and an encoder writes zeros, so a re-encoded
// valid IU equals the input with these bytes cleared.
var (
	rsvLoginReqIB   = [][2]int{{1, 8}, {20, 24}, {27, 28}, {30, 32}}
	rsvLoginReqRDMA = [][2]int{{50, 56}}
	rsvLoginRsp     = [][2]int{{1, 4}, {27, 52}}
	rsvLoginRej     = [][2]int{{1, 4}, {16, 24}, {26, 32}}
	rsvOpTag        = [][2]int{{1, 8}} // SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP
	rsvTLogout      = [][2]int{{2, 4}}
	rsvCredReq      = [][2]int{{2, 4}}
	rsvTskMgmt      = [][2]int{{2, 8}, {16, 20}, {28, 30}, {31, 32}, {40, 48}}
	rsvRsp          = [][2]int{{2, 4}, {16, 18}}
	rsvAerReq       = [][2]int{{2, 4}, {16, 20}, {32, 36}}
	rsvCmd          = [][2]int{{2, 5}, {16, 20}, {28, 29}, {30, 31}}
)

// normalized returns b[:n] with the reserved ranges cleared.
func normalized(b []byte, n int, reserved [][2]int) []byte {
	w := bytes.Clone(b[:n])
	for _, r := range reserved {
		clear(w[r[0]:r[1]])
	}
	return w
}

// reencode checks that encoding f gives back in[:n] (reserved bytes cleared) and that
// decoding that gives f again.
func reencode[F any](t *testing.T, in []byte, n int, reserved [][2]int, f F,
	encode func([]byte, *F) (int, error), decode func([]byte) (F, error),
) {
	t.Helper()
	buf := make([]byte, n)
	m, err := encode(buf, &f)
	require.NoError(t, err)
	require.Equal(t, n, m)
	require.Equal(t, normalized(in, n, reserved), buf)
	f2, err := decode(buf)
	require.NoError(t, err)
	require.Equal(t, f, f2)
}

func encLoginReqIB(b []byte, f *srp.LoginReqFields) (int, error) { return srp.LoginReq(b).Encode(f) }
func encLoginReqRDMA(b []byte, f *srp.LoginReqFields) (int, error) {
	return srp.LoginReqRDMA(b).Encode(f)
}

func FuzzLoginReq(f *testing.F) {
	f.Add(linuxRDMACMLogin(0x80))
	f.Add(linuxRDMACMLogin(0x81))
	ib := make([]byte, 92)
	fields := testLoginReqFields()
	_, _ = srp.LoginReq(ib).Encode(&fields)
	f.Add(ib)
	f.Add(ib[:64])
	f.Add(make([]byte, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The generic decoder, checked against the explicit ones.
		got, err := srp.ParseLoginReq(b)
		if err == nil {
			var want srp.LoginReqFields
			var werr error
			if len(b) == srp.LoginReqRDMASize {
				want, werr = srp.ParseLoginReqRDMA(b)
			} else {
				want, werr = srp.ParseLoginReqIB(b)
			}
			require.NoError(t, werr)
			require.Equal(t, want, got)
			// Both forms carry the same logical fields.
			for _, enc := range []func([]byte, *srp.LoginReqFields) (int, error){encLoginReqIB, encLoginReqRDMA} {
				buf := make([]byte, 64)
				n, err := enc(buf, &got)
				require.NoError(t, err)
				again, err := srp.ParseLoginReq(buf[:n])
				require.NoError(t, err)
				require.Equal(t, got, again)
			}
		}
		fixedOp(t, b, srp.OpLoginReq, 0, srp.LoginReqSize, rsvLoginReqIB, encLoginReqIB, srp.ParseLoginReqIB)
		fixedOp(t, b, srp.OpLoginReq, 11, srp.LoginReqRDMASize, rsvLoginReqRDMA, encLoginReqRDMA, srp.ParseLoginReqRDMA)
	})
}

func FuzzLoginRspRej(f *testing.F) {
	rsp := make([]byte, srp.LoginRspSize)
	_, _ = srp.LoginRsp(rsp).Encode(&srp.LoginRspFields{ReqLimDelta: 64, MaxITIULen: 8276, MaxTIIULen: 8260, SupBufFmt: 6, RspFlags: 0x81})
	f.Add(rsp)
	rej := make([]byte, srp.LoginRejSize)
	_, _ = srp.LoginRej(rej).Encode(&srp.LoginRejFields{Reason: srp.LoginRejChannelLimitReached, SupBufFmt: 6})
	f.Add(rej)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp(t, b, srp.OpLoginRsp, 0, srp.LoginRspSize, rsvLoginRsp,
			func(b []byte, f *srp.LoginRspFields) (int, error) { return srp.LoginRsp(b).Encode(f) }, srp.ParseLoginRsp)
		fixedOp(t, b, srp.OpLoginRej, 0, srp.LoginRejSize, rsvLoginRej,
			func(b []byte, f *srp.LoginRejFields) (int, error) { return srp.LoginRej(b).Encode(f) }, srp.ParseLoginRej)
	})
}

// fixedOp runs decode on b for a fixed-size IU with opcode op at byte opAt. The decoder must
// accept exactly the inputs of at least size bytes with the right opcode, and what it accepts
// must re-encode to the same bytes.
func fixedOp[F any](t *testing.T, b []byte, op srp.Opcode, opAt, size int, reserved [][2]int,
	encode func([]byte, *F) (int, error), decode func([]byte) (F, error),
) {
	t.Helper()
	f, err := decode(b)
	if err != nil {
		if len(b) >= size {
			require.NotEqual(t, byte(op), b[opAt], "rejected a full-size IU with the right opcode: %v", err)
		}
		return
	}
	require.GreaterOrEqual(t, len(b), size)
	require.Equal(t, byte(op), b[opAt])
	reencode(t, b, size, reserved, f, encode, decode)
}

func FuzzTskMgmt(f *testing.F) {
	b := make([]byte, srp.TskMgmtSize)
	_, _ = srp.TskMgmt(b).Encode(&srp.TskMgmtFields{Tag: 1 << 31, LUN: 1 << 48, Func: srp.TskLUNReset, TaskTag: 0xffffffff})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp(t, b, srp.OpTskMgmt, 0, srp.TskMgmtSize, rsvTskMgmt,
			func(b []byte, f *srp.TskMgmtFields) (int, error) { return srp.TskMgmt(b).Encode(f) }, srp.ParseTskMgmt)
	})
}

func FuzzLogout(f *testing.F) {
	b := make([]byte, 16)
	_, _ = srp.ILogout(b).Encode(&srp.ILogoutFields{Tag: 7})
	f.Add(b)
	b = make([]byte, 16)
	_, _ = srp.TLogout(b).Encode(&srp.TLogoutFields{SolNot: 1, Reason: srp.TLogoutInvalidIULength, Tag: 7})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp(t, b, srp.OpILogout, 0, srp.ILogoutSize, rsvOpTag,
			func(b []byte, f *srp.ILogoutFields) (int, error) { return srp.ILogout(b).Encode(f) }, srp.ParseILogout)
		fixedOp(t, b, srp.OpTLogout, 0, srp.TLogoutSize, rsvTLogout,
			func(b []byte, f *srp.TLogoutFields) (int, error) { return srp.TLogout(b).Encode(f) }, srp.ParseTLogout)
	})
}

func FuzzCredAer(f *testing.F) {
	for _, enc := range []func(b []byte) (int, error){
		func(b []byte) (int, error) { return srp.CredReq(b).Encode(&srp.CredReqFields{ReqLimDelta: 5, Tag: 9}) },
		func(b []byte) (int, error) { return srp.CredRsp(b).Encode(&srp.CredRspFields{Tag: 9}) },
		func(b []byte) (int, error) {
			return srp.AerReq(b).Encode(&srp.AerReqFields{ReqLimDelta: 1, Tag: 9, LUN: 1 << 48, SenseData: []byte{0x70, 0, 6, 0}})
		},
		func(b []byte) (int, error) { return srp.AerRsp(b).Encode(&srp.AerRspFields{Tag: 9}) },
	} {
		b := make([]byte, 64)
		n, _ := enc(b)
		f.Add(b[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp(t, b, srp.OpCredReq, 0, srp.CredReqSize, rsvCredReq,
			func(b []byte, f *srp.CredReqFields) (int, error) { return srp.CredReq(b).Encode(f) }, srp.ParseCredReq)
		fixedOp(t, b, srp.OpCredRsp, 0, srp.CredRspSize, rsvOpTag,
			func(b []byte, f *srp.CredRspFields) (int, error) { return srp.CredRsp(b).Encode(f) }, srp.ParseCredRsp)
		fixedOp(t, b, srp.OpAerRsp, 0, srp.AerRspSize, rsvOpTag,
			func(b []byte, f *srp.AerRspFields) (int, error) { return srp.AerRsp(b).Encode(f) }, srp.ParseAerRsp)

		aer, err := srp.ParseAerReq(b)
		if err != nil {
			return
		}
		n := srp.AerReq(b).Len()
		require.LessOrEqual(t, n, len(b))
		require.Equal(t, n, srp.AerReqMinSize+len(aer.SenseData))
		reencode(t, b, n, rsvAerReq, aer,
			func(b []byte, f *srp.AerReqFields) (int, error) { return srp.AerReq(b).Encode(f) }, srp.ParseAerReq)
	})
}

func FuzzRsp(f *testing.F) {
	for _, in := range []srp.RspFields{
		{ReqLimDelta: 1, Tag: 3},
		{ReqLimDelta: 1, Tag: 3, Status: 2, Flags: srp.DIUNDER, DataInResCnt: 7, SenseData: []byte{0x70, 0, 5, 0, 0, 0, 0, 10}},
		{ReqLimDelta: 2, Tag: 3, RespData: []byte{0, 0, 0, 4}, SenseData: []byte{0x72, 0, 0, 0}},
	} {
		b := make([]byte, srp.RspLen(&in))
		_, _ = srp.Rsp(b).Encode(&in)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := srp.ParseRsp(b)
		if err != nil {
			return
		}
		v := srp.Rsp(b)
		n := v.Len()
		require.LessOrEqual(t, n, len(b))
		require.Equal(t, n, srp.RspLen(&r))
		require.Equal(t, v.RespDataLen() != 0, r.Flags&srp.RSPVALID != 0)
		require.Equal(t, v.SenseDataLen() != 0, r.Flags&srp.SNSVALID != 0)
		reencode(t, b, n, rsvRsp, r,
			func(b []byte, f *srp.RspFields) (int, error) { return srp.Rsp(b).Encode(f) }, srp.ParseRsp)
	})
}

func FuzzCmd(f *testing.F) {
	for _, tc := range cmdCases() {
		f.Add(tc.want, tc.immOff)
	}
	f.Add(cat(cmdHeader(0x02, 0, 3, 0), dd(1, 2, 47), be32(0), make([]byte, 48)), uint16(0))
	f.Add(cat(cmdHeader(0x30, 0, 0, 0), []byte{0xFF, 0xFF, 0xFF, 0xFF}, make([]byte, 16)), uint16(68))
	f.Fuzz(func(t *testing.T, b []byte, immOff uint16) {
		c := srp.Cmd(b)
		out, in, err := c.DataBuffers(immOff)
		if err != nil {
			require.Equal(t, srp.DataBuf{}, out)
			require.Equal(t, srp.DataBuf{}, in)
			_, perr := srp.ParseCmd(b, immOff)
			require.Equal(t, err.Error(), perr.Error())
			return
		}
		require.Equal(t, c.DataOutFmt(), out.Format())
		require.Equal(t, c.DataInFmt(), in.Format())
		require.NotEqual(t, srp.DescImm, in.Format())
		descEnd := srp.CmdMinSize + c.AddCDBLen() + len(out.Descriptor()) + len(in.Descriptor())
		for _, d := range []srp.DataBuf{out, in} {
			// Walk every descriptor the way the data path does; none may be out of range.
			var sum uint64
			for i := 0; i < d.NumDescriptors(); i++ {
				sum += uint64(d.DescriptorAt(i).Len())
			}
			require.LessOrEqual(t, d.NumDescriptors(), d.TableLen())
			require.Equal(t, d.External(), d.TableLen() > d.NumDescriptors())
			switch d.Format() {
			case srp.DescDirect:
				require.Equal(t, uint64(d.Len()), sum)
			case srp.DescIndirect:
				require.Zero(t, d.TableDescriptor().Len()%16)
				if d.External() {
					require.LessOrEqual(t, sum, uint64(d.Len()))
				} else {
					require.Equal(t, uint64(d.Len()), sum)
				}
			case srp.DescImm:
				require.Len(t, d.ImmediateData(), int(d.Len()))
				require.LessOrEqual(t, descEnd, int(immOff))
				require.Equal(t, len(b), int(immOff)+int(d.Len()))
			}
		}
		if out.Format() != srp.DescImm {
			require.Equal(t, len(b), descEnd)
		}

		// Re-encoding gives back the input with reserved bytes and bits and the padding
		// before immediate data cleared.
		fields, err := srp.ParseCmd(b, immOff)
		require.NoError(t, err)
		want := normalized(b, len(b), rsvCmd)
		want[29] &= 0x07
		want[31] &= 0xFC
		if out.Format() == srp.DescImm {
			clear(want[descEnd:immOff])
		}
		buf := make([]byte, len(b))
		n, err := srp.Cmd(buf).Encode(&fields)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
		require.Equal(t, want, buf)
		again, err := srp.ParseCmd(buf, immOff)
		require.NoError(t, err)
		require.Equal(t, fields, again)
	})
}
