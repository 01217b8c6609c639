package iu_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

// testCDB is a READ(16) of 8 blocks at LBA 0x1234.
var testCDB = [16]byte{0x88, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 8, 0, 0}

// cmdHeader is the fixed part of the SRP_CMDs below, laid out as struct srp_cmd in
// include/scsi/srp.h: opcode, sol_not, reserved1[3], buf_fmt, data_out_desc_cnt,
// data_in_desc_cnt, tag, reserved2[4], lun, reserved3, task_attr, reserved4, add_cdb_len,
// cdb[16].
func cmdHeader(bufFmt, doCnt, diCnt, addCDBLen byte) []byte {
	return cat(
		[]byte{0x02, 0x04, 0, 0, 0, bufFmt, doCnt, diCnt},      // SRP_CMD, UCSOLNT
		[]byte{1, 2, 3, 4, 5, 6, 7, 8},                         // tag
		[]byte{0, 0, 0, 0},                                     // reserved2
		[]byte{0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48}, // lun
		[]byte{0, 0x02, 0, addCDBLen},                          // reserved3, task_attr ORDERED, reserved4, add_cdb_len
		testCDB[:],
	)
}

// cmdFields is the CmdFields matching cmdHeader.
func cmdFields(out, in iu.DataBufFields, addCDB []byte) iu.CmdFields {
	return iu.CmdFields{
		SolNot: iu.UCSOLNT, Tag: testTag, LUN: testLUN, TaskAttr: iu.TaskAttrOrdered,
		CDB: testCDB, AddCDB: addCDB, DataOut: out, DataIn: in,
	}
}

// dd writes a direct descriptor (struct srp_direct_buf: __be64 va, __be32 key, __be32 len)
// by hand.
func dd(va uint64, key, n uint32) []byte {
	return []byte{
		byte(va >> 56), byte(va >> 48), byte(va >> 40), byte(va >> 32),
		byte(va >> 24), byte(va >> 16), byte(va >> 8), byte(va),
		byte(key >> 24), byte(key >> 16), byte(key >> 8), byte(key),
		byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n),
	}
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

var (
	ddA = iu.DirectBufFields{VA: 0x00007f0012345000, Key: 0x00abcdef, Len: 0x1000}
	ddB = iu.DirectBufFields{VA: 0x00007f0012346000, Key: 0x00abcdf0, Len: 0x2000}
	ddC = iu.DirectBufFields{VA: 0x00007f0012348000, Key: 0x00abcdf1, Len: 0x0800}
	// ddT locates a descriptor table in initiator memory; its length varies per case.
	ddT = func(n uint32) iu.DirectBufFields {
		return iu.DirectBufFields{VA: 0xffff888012340000, Key: 0x55, Len: n}
	}
)

func ddBytes(f iu.DirectBufFields) []byte { return dd(f.VA, f.Key, f.Len) }

// immPayload is n bytes of a recognisable pattern.
func immPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return b
}

type cmdCase struct {
	name   string
	f      iu.CmdFields
	immOff uint16 // offset granted at login (0: immediate data not negotiated)
	want   []byte
	check  func(t *testing.T, out, in iu.DataBuf)
}

func cmdCases() []cmdCase {
	addCDB := []byte{0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xAB, 0xAC, 0xAD, 0xAE, 0xAF}
	imm512 := immPayload(512)
	imm100 := immPayload(100)
	return []cmdCase{
		{
			name: "no data",
			f:    cmdFields(iu.DataBufFields{}, iu.DataBufFields{}, nil),
			want: cmdHeader(0x00, 0, 0, 0),
			check: func(t *testing.T, out, in iu.DataBuf) {
				for _, d := range []iu.DataBuf{out, in} {
					require.False(t, d.Present())
					require.Equal(t, iu.DescNone, d.Format())
					require.Zero(t, d.Len())
					require.Zero(t, d.NumDescriptors())
					require.Zero(t, d.TableLen())
					require.False(t, d.External())
					require.Nil(t, d.Descriptor())
					require.Nil(t, d.TableDescriptor())
					require.Nil(t, d.ImmediateData())
				}
			},
		},
		{
			// ib_srp, one registered region, write: buf_fmt 0x10, counts left 0, 64 bytes.
			name: "direct data-out",
			f:    cmdFields(iu.DataBufFields{Format: iu.DescDirect, Direct: ddA}, iu.DataBufFields{}, nil),
			want: cat(cmdHeader(0x10, 0, 0, 0), dd(0x00007f0012345000, 0x00abcdef, 0x1000)),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, iu.DescDirect, out.Format())
				require.Equal(t, uint32(0x1000), out.Len())
				require.Equal(t, 1, out.NumDescriptors())
				require.Equal(t, 1, out.TableLen())
				require.False(t, out.External())
				require.Equal(t, ddA, out.DescriptorAt(0).Fields())
				require.Equal(t, ddBytes(ddA), out.Descriptor())
				require.False(t, in.Present())
			},
		},
		{
			// Count 1 for a direct descriptor, as the SRP text reads, is accepted too.
			name: "direct data-in with count 1",
			f:    cmdFields(iu.DataBufFields{}, iu.DataBufFields{Format: iu.DescDirect, DescCnt: 1, Direct: ddB}, nil),
			want: cat(cmdHeader(0x01, 0, 1, 0), dd(0x00007f0012346000, 0x00abcdf0, 0x2000)),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.False(t, out.Present())
				require.Equal(t, iu.DescDirect, in.Format())
				require.Equal(t, uint32(0x2000), in.Len())
				require.Equal(t, 1, in.NumDescriptors())
				require.Equal(t, ddB, in.DescriptorAt(0).Fields())
			},
		},
		{
			// ib_srp, several regions, read: buf_fmt 0x02, data_in_desc_cnt n, 48 + 20 + 16n.
			name: "indirect data-in with 3 descriptors in the IU",
			f: cmdFields(iu.DataBufFields{}, iu.DataBufFields{
				Format: iu.DescIndirect, DescCnt: 3,
				Indirect: iu.IndirectBufFields{Table: ddT(48), TotalLen: 0x3800, Descs: []iu.DirectBufFields{ddA, ddB, ddC}},
			}, nil),
			want: cat(cmdHeader(0x02, 0, 3, 0),
				dd(0xffff888012340000, 0x55, 48), // table_desc: 3 entries
				be32(0x3800),                     // len = 0x1000 + 0x2000 + 0x800
				dd(0x00007f0012345000, 0x00abcdef, 0x1000),
				dd(0x00007f0012346000, 0x00abcdf0, 0x2000),
				dd(0x00007f0012348000, 0x00abcdf1, 0x0800),
			),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.False(t, out.Present())
				require.Equal(t, iu.DescIndirect, in.Format())
				require.Equal(t, uint32(0x3800), in.Len())
				require.Equal(t, 3, in.NumDescriptors())
				require.Equal(t, 3, in.TableLen())
				require.False(t, in.External())
				require.Equal(t, ddT(48), in.TableDescriptor().Fields())
				for i, want := range []iu.DirectBufFields{ddA, ddB, ddC} {
					require.Equal(t, want, in.DescriptorAt(i).Fields(), "descriptor %d", i)
				}
				require.Len(t, in.Descriptor(), 20+48)
			},
		},
		{
			// allow_ext_sg=1: 5 descriptors in the table, only the first 2 in the IU.
			name: "indirect data-out with an external table",
			f: cmdFields(iu.DataBufFields{
				Format: iu.DescIndirect, DescCnt: 2,
				Indirect: iu.IndirectBufFields{Table: ddT(80), TotalLen: 0x5000, Descs: []iu.DirectBufFields{ddA, ddA}},
			}, iu.DataBufFields{}, nil),
			want: cat(cmdHeader(0x20, 2, 0, 0),
				dd(0xffff888012340000, 0x55, 80),
				be32(0x5000),
				dd(0x00007f0012345000, 0x00abcdef, 0x1000),
				dd(0x00007f0012345000, 0x00abcdef, 0x1000),
			),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, iu.DescIndirect, out.Format())
				require.True(t, out.External(), "table must be fetched by RDMA READ")
				require.Equal(t, 2, out.NumDescriptors())
				require.Equal(t, 5, out.TableLen())
				require.Equal(t, uint32(0x5000), out.Len())
				require.Equal(t, iu.DirectBufFields{VA: 0xffff888012340000, Key: 0x55, Len: 80}, out.TableDescriptor().Fields())
				require.False(t, in.Present())
			},
		},
		{
			name: "indirect data-in with no descriptor in the IU",
			f: cmdFields(iu.DataBufFields{}, iu.DataBufFields{
				Format:   iu.DescIndirect,
				Indirect: iu.IndirectBufFields{Table: ddT(32), TotalLen: 0x3000},
			}, nil),
			want: cat(cmdHeader(0x02, 0, 0, 0), dd(0xffff888012340000, 0x55, 32), be32(0x3000)),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.True(t, in.External())
				require.Zero(t, in.NumDescriptors())
				require.Equal(t, 2, in.TableLen())
				require.Panics(t, func() { in.DescriptorAt(0) })
			},
		},
		{
			// ib_srp small write with immediate data: buf_fmt 0x30, counts 0, data length at
			// byte 48, bytes 52..67 zero, payload from SRP_IMM_DATA_OFFSET 68.
			name:   "immediate data-out",
			f:      cmdFields(iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: imm512}, iu.DataBufFields{}, nil),
			immOff: 68,
			want:   cat(cmdHeader(0x30, 0, 0, 0), []byte{0x00, 0x00, 0x02, 0x00}, make([]byte, 16), imm512),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, iu.DescImm, out.Format())
				require.Equal(t, uint32(512), out.Len())
				require.Zero(t, out.NumDescriptors())
				require.Zero(t, out.TableLen())
				require.False(t, out.External())
				require.Equal(t, imm512, out.ImmediateData())
				require.Equal(t, []byte{0x00, 0x00, 0x02, 0x00}, out.Descriptor())
				require.False(t, in.Present())
			},
		},
		{
			name: "additional CDB with direct data-in",
			f:    cmdFields(iu.DataBufFields{}, iu.DataBufFields{Format: iu.DescDirect, Direct: ddC}, addCDB),
			want: cat(cmdHeader(0x01, 0, 0, 16), addCDB, dd(0x00007f0012348000, 0x00abcdf1, 0x0800)),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, ddC, in.DescriptorAt(0).Fields())
			},
		},
		{
			// The 68 = 48 + 16 + 4 offset leaves exactly room for a 16-byte additional CDB
			// and the immediate descriptor.
			name:   "additional CDB with immediate data-out",
			f:      cmdFields(iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: imm100}, iu.DataBufFields{}, addCDB),
			immOff: 68,
			want:   cat(cmdHeader(0x30, 0, 0, 16), addCDB, []byte{0x00, 0x00, 0x00, 100}, imm100),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, imm100, out.ImmediateData())
			},
		},
		{
			name: "bidirectional: direct data-out then indirect data-in",
			f: cmdFields(iu.DataBufFields{Format: iu.DescDirect, Direct: ddA}, iu.DataBufFields{
				Format: iu.DescIndirect, DescCnt: 2,
				Indirect: iu.IndirectBufFields{Table: ddT(32), TotalLen: 0x2800, Descs: []iu.DirectBufFields{ddB, ddC}},
			}, nil),
			want: cat(cmdHeader(0x12, 0, 2, 0),
				dd(0x00007f0012345000, 0x00abcdef, 0x1000), // data-out first
				dd(0xffff888012340000, 0x55, 32), be32(0x2800),
				dd(0x00007f0012346000, 0x00abcdf0, 0x2000),
				dd(0x00007f0012348000, 0x00abcdf1, 0x0800),
			),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, ddA, out.DescriptorAt(0).Fields())
				require.Equal(t, ddB, in.DescriptorAt(0).Fields())
				require.Equal(t, ddC, in.DescriptorAt(1).Fields())
			},
		},
		{
			name:   "immediate data-out then direct data-in",
			f:      cmdFields(iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: imm100}, iu.DataBufFields{Format: iu.DescDirect, Direct: ddB}, nil),
			immOff: 68,
			want: cat(cmdHeader(0x31, 0, 0, 0), []byte{0, 0, 0, 100},
				dd(0x00007f0012346000, 0x00abcdf0, 0x2000), // bytes 52..67
				imm100),
			check: func(t *testing.T, out, in iu.DataBuf) {
				require.Equal(t, imm100, out.ImmediateData())
				require.Equal(t, ddB, in.DescriptorAt(0).Fields())
			},
		},
	}
}

func TestCmdLayoutAndDataBuffers(t *testing.T) {
	var po, pi iu.DataBuf
	for _, tc := range cmdCases() {
		t.Run(tc.name, func(t *testing.T) {
			n, err := iu.CmdLen(&tc.f)
			require.NoError(t, err)
			require.Equal(t, len(tc.want), n)

			buf := ffBuf(len(tc.want) + 8)
			n, err = iu.Cmd(buf).Encode(&tc.f)
			require.NoError(t, err)
			require.Equal(t, tc.want, buf[:n])
			require.Equal(t, ffBuf(8), buf[n:])

			c := iu.Cmd(tc.want)
			out, in, err := c.DataBuffers(tc.immOff)
			require.NoError(t, err)
			tc.check(t, out, in)
			// In place, over what another command left (every case has been parsed
			// into po, pi by the time the last one runs).
			require.NoError(t, c.ParseDataBuffers(tc.immOff, &po, &pi))
			require.Equal(t, out, po)
			require.Equal(t, in, pi)

			require.Equal(t, iu.UCSOLNT, c.SolNot())
			require.Equal(t, testTag, c.Tag())
			require.Equal(t, testLUN, c.LUN())
			require.Equal(t, iu.TaskAttrOrdered, c.TaskAttr())
			require.Equal(t, tc.f.DataOut.Format, c.DataOutFmt())
			require.Equal(t, tc.f.DataIn.Format, c.DataInFmt())
			require.Equal(t, cat(testCDB[:], tc.f.AddCDB), c.CDB())

			got, err := iu.Cmd(tc.want).Fields(tc.immOff)
			require.NoError(t, err)
			require.Equal(t, tc.f, got, "decode(encode(x)) != x")
		})
	}
}

func TestCmdDataBuffersRejects(t *testing.T) {
	byName := map[string]cmdCase{}
	for _, tc := range cmdCases() {
		byName[tc.name] = tc
	}
	// from returns a copy of a valid case's bytes with patch applied.
	from := func(name string, patch func(b []byte) []byte) []byte {
		tc, ok := byName[name]
		require.True(t, ok, name)
		return patch(bytes.Clone(tc.want))
	}
	const (
		direct   = "direct data-out"
		indirect = "indirect data-in with 3 descriptors in the IU"
		external = "indirect data-out with an external table"
		imm      = "immediate data-out"
	)
	for _, tc := range []struct {
		name   string
		b      []byte
		immOff uint16
		want   error
	}{
		{"truncated below 48 bytes", from(direct, func(b []byte) []byte { return b[:47] }), 0, iu.ErrShort},
		{"empty", nil, 0, iu.ErrShort},
		{"wrong opcode", from(direct, func(b []byte) []byte { b[0] = byte(iu.OpTskMgmt); return b }), 0, iu.ErrOpcode},
		{"additional CDB past the end", cmdHeader(0x00, 0, 0, 16), 0, iu.ErrShort},
		{"additional CDB hides the descriptor", from(direct, func(b []byte) []byte { b[31] = 16; return b }), 0, iu.ErrShort},
		{"direct descriptor truncated", from(direct, func(b []byte) []byte { return b[:63] }), 0, iu.ErrShort},
		{"bytes after the descriptors", from(direct, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), 0, iu.ErrInconsistent},
		{"direct descriptor with count 2", from(direct, func(b []byte) []byte { b[6] = 2; return b }), 0, iu.ErrInconsistent},
		{"count without a descriptor", from(direct, func(b []byte) []byte { b[7] = 1; return b }), 0, iu.ErrInconsistent},
		{"indirect count larger than the IU holds", from(indirect, func(b []byte) []byte { b[7] = 4; return b }), 0, iu.ErrShort},
		{"indirect count smaller than the IU holds", from(indirect, func(b []byte) []byte { b[7] = 2; return b }), 0, iu.ErrInconsistent},
		{"indirect list truncated", from(indirect, func(b []byte) []byte { return b[:len(b)-16] }), 0, iu.ErrShort},
		{"table length not a multiple of 16", from(indirect, func(b []byte) []byte { b[48+15] = 47; return b }), 0, iu.ErrInconsistent},
		{"table length zero", from(indirect, func(b []byte) []byte { b[48+15] = 0; return b }), 0, iu.ErrInconsistent},
		{"empty indirect table and no descriptors", cat(cmdHeader(0x02, 0, 0, 0), dd(0xffff888012340000, 0x55, 0), be32(0)), 0, iu.ErrInconsistent},
		{"partial list longer than the table", from(indirect, func(b []byte) []byte { b[48+15] = 32; return b }), 0, iu.ErrInconsistent},
		{"total length above the descriptors", from(indirect, func(b []byte) []byte { b[48+19]++; return b }), 0, iu.ErrInconsistent},
		{"total length below the descriptors", from(indirect, func(b []byte) []byte { b[48+19]--; return b }), 0, iu.ErrInconsistent},
		{"external table with the partial list above total", from(external, func(b []byte) []byte { b[48+18] = 0x10; return b }), 0, iu.ErrInconsistent},
		{"immediate data-in", from(direct, func(b []byte) []byte { b[5] = 0x03; return b }), 68, iu.ErrUnsupportedFormat},
		{"reserved data-out format", from(direct, func(b []byte) []byte { b[5] = 0x40; return b }), 0, iu.ErrUnsupportedFormat},
		{"reserved data-in format", from(direct, func(b []byte) []byte { b[5] = 0x1F; return b }), 0, iu.ErrUnsupportedFormat},
		{"immediate data not negotiated", byName[imm].want, 0, iu.ErrUnsupportedFormat},
		{"immediate length 0xFFFFFFFF", from(imm, func(b []byte) []byte { copy(b[48:52], []byte{0xFF, 0xFF, 0xFF, 0xFF}); return b }), 68, iu.ErrInconsistent},
		{"immediate data shorter than its descriptor", from(imm, func(b []byte) []byte { return b[:len(b)-1] }), 68, iu.ErrInconsistent},
		{"immediate data longer than its descriptor", from(imm, func(b []byte) []byte { return append(b, 0) }), 68, iu.ErrInconsistent},
		{"immediate data offset beyond the IU", byName[imm].want, 4096, iu.ErrInconsistent},
		{"immediate descriptor truncated", from(imm, func(b []byte) []byte { return b[:50] }), 68, iu.ErrShort},
		// 60 + 100 bytes of data is exactly the IU length, but the data-in descriptor
		// (bytes 52..67) runs into the data.
		{"descriptors overlap the immediate data", cat(cmdHeader(0x31, 0, 0, 0), be32(100), dd(1, 2, 3), immPayload(92)), 60, iu.ErrInconsistent},
		{"immediate data offset inside the header", cat(cmdHeader(0x30, 0, 0, 0), be32(12)), 40, iu.ErrInconsistent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in, err := iu.Cmd(tc.b).DataBuffers(tc.immOff)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, iu.DataBuf{}, out)
			require.Equal(t, iu.DataBuf{}, in)
			_, err = iu.Cmd(tc.b).Fields(tc.immOff)
			require.ErrorIs(t, err, tc.want)
			// In place: what a reused command context held before is gone.
			valid := byName[direct].want
			require.NoError(t, iu.Cmd(valid).ParseDataBuffers(0, &out, &in))
			require.True(t, out.Present())
			require.ErrorIs(t, iu.Cmd(tc.b).ParseDataBuffers(tc.immOff, &out, &in), tc.want)
			require.Equal(t, iu.DataBuf{}, out)
			require.Equal(t, iu.DataBuf{}, in)
		})
	}
}

func TestCmdErrorMessage(t *testing.T) {
	b := cat(cmdHeader(0x02, 0, 3, 0), dd(0xffff888012340000, 0x55, 47), be32(0x3800), make([]byte, 48))
	_, _, err := iu.Cmd(b).DataBuffers(0)
	require.EqualError(t, err, "srp: SRP_CMD tag 0x102030405060708: data-in indirect table length 47 is not a non-zero multiple of 16: srp: inconsistent IU")
}

func TestCmdEncodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    iu.CmdFields
		size int
		want error
	}{
		{"additional CDB not a multiple of 4", cmdFields(iu.DataBufFields{}, iu.DataBufFields{}, []byte{1, 2, 3}), 100, iu.ErrInvalidField},
		{"additional CDB too long", cmdFields(iu.DataBufFields{}, iu.DataBufFields{}, make([]byte, 256)), 400, iu.ErrInvalidField},
		{"immediate data-in", cmdFields(iu.DataBufFields{}, iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68}, nil), 100, iu.ErrInvalidField},
		{"immediate data offset inside the descriptors", cmdFields(iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 51}, iu.DataBufFields{}, nil), 100, iu.ErrInvalidField},
		{"format beyond a nibble", cmdFields(iu.DataBufFields{Format: 16}, iu.DataBufFields{}, nil), 100, iu.ErrInvalidField},
		{"256 partial descriptors", cmdFields(iu.DataBufFields{}, iu.DataBufFields{Format: iu.DescIndirect, Indirect: iu.IndirectBufFields{Descs: make([]iu.DirectBufFields, 256)}}, nil), 5000, iu.ErrInvalidField},
		{"buffer too small", cmdFields(iu.DataBufFields{Format: iu.DescDirect}, iu.DataBufFields{}, nil), 63, iu.ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := ffBuf(tc.size)
			_, err := iu.Cmd(buf).Encode(&tc.f)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, ffBuf(tc.size), buf, "nothing written on error")
		})
	}
}

func TestCmdReservedBits(t *testing.T) {
	// Reserved bits of TASK ATTRIBUTE (7:3) and ADDITIONAL CDB LENGTH (1:0) are ignored on
	// decode and written as zero.
	b := cat(cmdHeader(0x01, 0, 0, 0x13), make([]byte, 16), dd(1, 2, 3))
	b[29] = 0xFA
	c := iu.Cmd(b)
	require.Equal(t, iu.TaskAttrOrdered, c.TaskAttr())
	require.Equal(t, 16, c.AddCDBLen())
	f, err := iu.Cmd(b).Fields(0)
	require.NoError(t, err)
	require.Len(t, f.AddCDB, 16)

	f.TaskAttr = 0xFA
	out := ffBuf(len(b))
	_, err = iu.Cmd(out).Encode(&f)
	require.NoError(t, err)
	require.Equal(t, byte(0x02), out[29])
	require.Equal(t, byte(16), out[31])
}
