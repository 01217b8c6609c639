package iu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

// descView is the contract of a data buffer descriptor view: it decodes and encodes in place.
// Descriptors have no Validate of their own: Cmd.DataBuffers checks them within their SRP_CMD.
type descView[F any] interface {
	~[]byte
	Fields() F
	Encode(*F) int
}

// checkDescLayout encodes in into a 0xFF-filled buffer 8 bytes larger than want, compares
// the output with want and checks that nothing past it was written, decodes want back to in,
// and checks that encoding into a buffer one byte short panics.
func checkDescLayout[V descView[F], F any](t *testing.T, want []byte, in F) {
	t.Helper()
	buf := ffBuf(len(want) + 8)
	n := V(buf).Encode(&in)
	require.Equal(t, want, buf[:n], "encoded bytes")
	require.Equal(t, ffBuf(8), buf[n:], "bytes past the descriptor must be untouched")
	require.Equal(t, in, V(want).Fields(), "decode(encode(x)) != x")
	require.Panics(t, func() { V(ffBuf(len(want) - 1)).Encode(&in) }, "encoding into a buffer one byte short")
}

func TestDirectBufLayout(t *testing.T) {
	// struct srp_direct_buf: __be64 va, __be32 key, __be32 len.
	want := []byte{
		0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, // va
		0x00, 0xab, 0xcd, 0xef, // key
		0x00, 0x00, 0x10, 0x00, // len
	}
	checkDescLayout[iu.DirectBuf](t, want, ddA)
	d := iu.DirectBuf(want)
	require.Equal(t, uint64(0x00007f0012345000), d.VA())
	require.Equal(t, uint32(0x00abcdef), d.Key())
	require.Equal(t, uint32(0x1000), d.Len())
}

func TestIndirectBufLayout(t *testing.T) {
	// struct srp_indirect_buf (packed): struct srp_direct_buf table_desc, __be32 len,
	// struct srp_direct_buf desc_list[].
	want := cat(
		[]byte{0xff, 0xff, 0x88, 0x80, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0x00, 0x00, 0x00, 0x20}, // table_desc
		[]byte{0x00, 0x00, 0x30, 0x00}, // len
		[]byte{0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x00, 0x10, 0x00},
		[]byte{0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x60, 0x00, 0x00, 0xab, 0xcd, 0xf0, 0x00, 0x00, 0x20, 0x00},
	)
	in := iu.IndirectBufFields{Table: ddT(32), TotalLen: 0x3000, Descs: []iu.DirectBufFields{ddA, ddB}}
	require.Equal(t, len(want), iu.IndirectBufLen(&in))
	checkDescLayout[iu.IndirectBuf](t, want, in)

	v := iu.IndirectBuf(want)
	require.Equal(t, 2, v.NumDescs())
	require.Equal(t, ddT(32), v.Table().Fields())
	require.Equal(t, uint32(0x3000), v.TotalLen())
	require.Equal(t, ddB, v.DescAt(1).Fields())
	require.Panics(t, func() { v.DescAt(2) })
	require.Panics(t, func() { v.DescAt(-1) })

	// A header without a list decodes to nil Descs.
	f := iu.IndirectBuf(want[:20]).Fields()
	require.Nil(t, f.Descs)
}

func TestImmBufLayout(t *testing.T) {
	// struct srp_imm_buf: __be32 len.
	b := ffBuf(6)
	require.Equal(t, 4, iu.ImmBuf(b).Encode(8192))
	require.Equal(t, []byte{0x00, 0x00, 0x20, 0x00, 0xFF, 0xFF}, b)
	require.Equal(t, uint32(8192), iu.ImmBuf(b).Len())
	require.Panics(t, func() { iu.ImmBuf(b[:3]).Encode(1) })
}

func TestDescFmtValues(t *testing.T) {
	// SRP_NO_DATA_DESC, SRP_DATA_DESC_DIRECT, SRP_DATA_DESC_INDIRECT, SRP_DATA_DESC_IMM;
	// SRP_BUF_FORMAT_DIRECT / _INDIRECT.
	checkNames(t, []named[iu.DescFmt]{
		{iu.DescNone, 0, "none"},
		{iu.DescDirect, 1, "direct"},
		{iu.DescIndirect, 2, "indirect"},
		{iu.DescImm, 3, "immediate"},
		{7, 7, "reserved descriptor format 7"},
	})
	require.Equal(t, iu.BufFmt(0x0002), iu.BufFormatDirect)
	require.Equal(t, iu.BufFmt(0x0004), iu.BufFormatIndirect)
}

func TestDataBufDescriptorAtBounds(t *testing.T) {
	var d iu.DataBuf
	require.Panics(t, func() { d.DescriptorAt(0) })
	b := cat(cmdHeader(0x10, 0, 0, 0), dd(1, 2, 3))
	out, _, err := iu.Cmd(b).DataBuffers(0)
	require.NoError(t, err)
	require.NotPanics(t, func() { out.DescriptorAt(0) })
	require.Panics(t, func() { out.DescriptorAt(1) })
}
