package iu_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
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

func FuzzLoginReq(f *testing.F) {
	f.Add(linuxRDMACMLogin(0x80))
	f.Add(linuxRDMACMLogin(0x81))
	ib := make([]byte, 92)
	fields := testLoginReqFields()
	iu.LoginReq(ib).Encode(&fields)
	f.Add(ib)
	f.Add(ib[:64])
	f.Add(make([]byte, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The generic decoder, checked against the explicit ones.
		got, err := iu.ParseLoginReq(b)
		if err == nil {
			var want iu.LoginReqFields
			var werr error
			if len(b) == iu.LoginReqRDMASize {
				want, werr = iu.Parse[iu.LoginReqRDMA](b)
			} else {
				want, werr = iu.Parse[iu.LoginReq](b)
			}
			require.NoError(t, werr)
			require.Equal(t, want, got)
			// Both forms carry the same logical fields.
			for _, enc := range []func([]byte, *iu.LoginReqFields) (int, error){
				encFixed[iu.LoginReq], encFixed[iu.LoginReqRDMA],
			} {
				buf := make([]byte, 64)
				n, err := enc(buf, &got)
				require.NoError(t, err)
				again, err := iu.ParseLoginReq(buf[:n])
				require.NoError(t, err)
				require.Equal(t, got, again)
			}
		}
		fixedOp[iu.LoginReq](t, b, iu.OpLoginReq, 0, iu.LoginReqSize, rsvLoginReqIB)
		fixedOp[iu.LoginReqRDMA](t, b, iu.OpLoginReq, 11, iu.LoginReqRDMASize, rsvLoginReqRDMA)
	})
}

func FuzzLoginRspRej(f *testing.F) {
	rsp := make([]byte, iu.LoginRspSize)
	iu.LoginRsp(rsp).Encode(&iu.LoginRspFields{ReqLimDelta: 64, MaxITIULen: 8276, MaxTIIULen: 8260, SupBufFmt: 6, RspFlags: 0x81})
	f.Add(rsp)
	rej := make([]byte, iu.LoginRejSize)
	iu.LoginRej(rej).Encode(&iu.LoginRejFields{Reason: iu.LoginRejChannelLimitReached, SupBufFmt: 6})
	f.Add(rej)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp[iu.LoginRsp](t, b, iu.OpLoginRsp, 0, iu.LoginRspSize, rsvLoginRsp)
		fixedOp[iu.LoginRej](t, b, iu.OpLoginRej, 0, iu.LoginRejSize, rsvLoginRej)
	})
}

// fixedOp decodes b as the fixed-size IU V with opcode op at byte opAt. The decoder must
// accept exactly the inputs of at least size bytes with the right opcode, and what it accepts
// must re-encode to the same bytes.
func fixedOp[V fixedIU[F], F any](t *testing.T, b []byte, op iu.Opcode, opAt, size int, reserved [][2]int) {
	t.Helper()
	f, err := iu.Parse[V](b)
	if err != nil {
		if len(b) >= size {
			require.NotEqual(t, byte(op), b[opAt], "rejected a full-size IU with the right opcode: %v", err)
		}
		return
	}
	require.GreaterOrEqual(t, len(b), size)
	require.Equal(t, byte(op), b[opAt])
	reencode(t, b, size, reserved, f, encFixed[V, F], iu.Parse[V, F])
}

func FuzzTskMgmt(f *testing.F) {
	b := make([]byte, iu.TskMgmtSize)
	iu.TskMgmt(b).Encode(&iu.TskMgmtFields{Tag: 1 << 31, LUN: 1 << 48, Func: iu.TskLUNReset, TaskTag: 0xffffffff})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp[iu.TskMgmt](t, b, iu.OpTskMgmt, 0, iu.TskMgmtSize, rsvTskMgmt)
	})
}

func FuzzLogout(f *testing.F) {
	b := make([]byte, 16)
	iu.ILogout(b).Encode(&iu.ILogoutFields{Tag: 7})
	f.Add(b)
	b = make([]byte, 16)
	iu.TLogout(b).Encode(&iu.TLogoutFields{SolNot: 1, Reason: iu.TLogoutInvalidIULength, Tag: 7})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp[iu.ILogout](t, b, iu.OpILogout, 0, iu.ILogoutSize, rsvOpTag)
		fixedOp[iu.TLogout](t, b, iu.OpTLogout, 0, iu.TLogoutSize, rsvTLogout)
	})
}

func FuzzCredAer(f *testing.F) {
	for _, enc := range []func(b []byte) (int, error){
		func(b []byte) (int, error) {
			return iu.CredReq(b).Encode(&iu.CredReqFields{ReqLimDelta: 5, Tag: 9}), nil
		},
		func(b []byte) (int, error) { return iu.CredRsp(b).Encode(&iu.CredRspFields{Tag: 9}), nil },
		func(b []byte) (int, error) {
			return iu.AerReq(b).Encode(&iu.AerReqFields{ReqLimDelta: 1, Tag: 9, LUN: 1 << 48, SenseData: []byte{0x70, 0, 6, 0}})
		},
		func(b []byte) (int, error) { return iu.AerRsp(b).Encode(&iu.AerRspFields{Tag: 9}), nil },
	} {
		b := make([]byte, 64)
		n, err := enc(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:n])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedOp[iu.CredReq](t, b, iu.OpCredReq, 0, iu.CredReqSize, rsvCredReq)
		fixedOp[iu.CredRsp](t, b, iu.OpCredRsp, 0, iu.CredRspSize, rsvOpTag)
		fixedOp[iu.AerRsp](t, b, iu.OpAerRsp, 0, iu.AerRspSize, rsvOpTag)

		aer, err := iu.Parse[iu.AerReq](b)
		if err != nil {
			return
		}
		n := iu.AerReqMinSize + len(aer.SenseData)
		require.LessOrEqual(t, n, len(b))
		reencode(t, b, n, rsvAerReq, aer, encVar[iu.AerReq, iu.AerReqFields], iu.Parse[iu.AerReq, iu.AerReqFields])
	})
}

func FuzzRsp(f *testing.F) {
	for _, in := range []iu.RspFields{
		{ReqLimDelta: 1, Tag: 3},
		{ReqLimDelta: 1, Tag: 3, Status: 2, Flags: iu.DIUNDER, DataInResCnt: 7, SenseData: []byte{0x70, 0, 5, 0, 0, 0, 0, 10}},
		{ReqLimDelta: 2, Tag: 3, RespData: []byte{0, 0, 0, 4}, SenseData: []byte{0x72, 0, 0, 0}},
	} {
		b := make([]byte, iu.RspLen(&in))
		if _, err := iu.Rsp(b).Encode(&in); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := iu.Parse[iu.Rsp](b)
		if err != nil {
			return
		}
		v := iu.Rsp(b)
		n := iu.RspLen(&r)
		require.LessOrEqual(t, n, len(b))
		require.Equal(t, uint64(n), iu.RspMinSize+uint64(v.RespDataLen())+uint64(v.SenseDataLen()))
		require.Equal(t, v.RespDataLen() != 0, r.Flags&iu.RSPVALID != 0)
		require.Equal(t, v.SenseDataLen() != 0, r.Flags&iu.SNSVALID != 0)
		reencode(t, b, n, rsvRsp, r, encVar[iu.Rsp, iu.RspFields], iu.Parse[iu.Rsp, iu.RspFields])
	})
}

// FuzzRspEncodeStatus: EncodeStatus writes what Encode writes for the same fields without
// response or sense data.
func FuzzRspEncodeStatus(f *testing.F) {
	f.Add(uint64(1), uint32(1), uint8(0), uint8(0), uint32(0), uint32(0))
	f.Add(uint64(1<<63), uint32(0xFFFFFFFF), uint8(2), uint8(0xFF), uint32(7), uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, tag uint64, delta uint32, status, flags uint8, doRes, diRes uint32) {
		want := make([]byte, iu.RspMinSize)
		_, err := iu.Rsp(want).Encode(&iu.RspFields{ReqLimDelta: delta, Tag: iu.Tag(tag), Status: status,
			Flags: iu.RspFlags(flags), DataOutResCnt: doRes, DataInResCnt: diRes})
		require.NoError(t, err)
		got := bytes.Repeat([]byte{0xFF}, iu.RspMinSize)
		require.Equal(t, iu.RspMinSize, iu.Rsp(got).EncodeStatus(iu.Tag(tag), delta, status, iu.RspFlags(flags), doRes, diRes))
		require.Equal(t, want, got)
	})
}

func FuzzCmd(f *testing.F) {
	for _, tc := range cmdCases() {
		f.Add(tc.want, tc.immOff)
	}
	f.Add(cat(cmdHeader(0x02, 0, 3, 0), dd(1, 2, 47), be32(0), make([]byte, 48)), uint16(0))
	f.Add(cat(cmdHeader(0x30, 0, 0, 0), []byte{0xFF, 0xFF, 0xFF, 0xFF}, make([]byte, 16)), uint16(68))
	// What a reused command context holds before ParseDataBuffers overwrites it.
	var prevOut, prevIn iu.DataBuf
	if err := iu.Cmd(cmdCases()[0].want).ParseDataBuffers(cmdCases()[0].immOff, &prevOut, &prevIn); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte, immOff uint16) {
		c := iu.Cmd(b)
		out, in, err := c.DataBuffers(immOff)
		po, pi := prevOut, prevIn
		perr := c.ParseDataBuffers(immOff, &po, &pi)
		require.Equal(t, err, perr)
		require.Equal(t, out, po)
		require.Equal(t, in, pi)
		if err != nil {
			require.Equal(t, iu.DataBuf{}, out)
			require.Equal(t, iu.DataBuf{}, in)
			_, perr := iu.Cmd(b).Fields(immOff)
			require.Equal(t, err.Error(), perr.Error())
			return
		}
		require.Equal(t, c.DataOutFmt(), out.Format())
		require.Equal(t, c.DataInFmt(), in.Format())
		require.NotEqual(t, iu.DescImm, in.Format())
		descEnd := iu.CmdMinSize + c.AddCDBLen() + len(out.Descriptor()) + len(in.Descriptor())
		for _, d := range []iu.DataBuf{out, in} {
			// Walk every descriptor the way the data path does; none may be out of range.
			var sum uint64
			for i := 0; i < d.NumDescriptors(); i++ {
				sum += uint64(d.DescriptorAt(i).Len())
			}
			require.LessOrEqual(t, d.NumDescriptors(), d.TableLen())
			require.Equal(t, d.External(), d.TableLen() > d.NumDescriptors())
			switch d.Format() {
			case iu.DescDirect:
				require.Equal(t, uint64(d.Len()), sum)
			case iu.DescIndirect:
				require.Zero(t, d.TableDescriptor().Len()%16)
				if d.External() {
					require.LessOrEqual(t, sum, uint64(d.Len()))
				} else {
					require.Equal(t, uint64(d.Len()), sum)
				}
			case iu.DescImm:
				require.Len(t, d.ImmediateData(), int(d.Len()))
				require.LessOrEqual(t, descEnd, int(immOff))
				require.Equal(t, len(b), int(immOff)+int(d.Len()))
			}
		}
		if out.Format() != iu.DescImm {
			require.Equal(t, len(b), descEnd)
		}

		// Re-encoding gives back the input with reserved bytes and bits and the padding
		// before immediate data cleared.
		fields, err := iu.Cmd(b).Fields(immOff)
		require.NoError(t, err)
		want := normalized(b, len(b), rsvCmd)
		want[29] &= 0x07
		want[31] &= 0xFC
		if out.Format() == iu.DescImm {
			clear(want[descEnd:immOff])
		}
		buf := make([]byte, len(b))
		n, err := iu.Cmd(buf).Encode(&fields)
		require.NoError(t, err)
		require.Equal(t, len(b), n)
		require.Equal(t, want, buf)
		again, err := iu.Cmd(buf).Fields(immOff)
		require.NoError(t, err)
		require.Equal(t, fields, again)
	})
}
