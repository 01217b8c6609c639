package iu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

func TestDirectBufLayout(t *testing.T) {
	// struct srp_direct_buf: __be64 va, __be32 key, __be32 len.
	want := []byte{
		0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, // va
		0x00, 0xab, 0xcd, 0xef, // key
		0x00, 0x00, 0x10, 0x00, // len
	}
	checkLayout(t, want, ddA, -1, encodeDirect, decodeDirect, iu.ErrShortIU)
	d := iu.DirectBuf(want)
	require.Equal(t, uint64(0x00007f0012345000), d.VA())
	require.Equal(t, uint32(0x00abcdef), d.Key())
	require.Equal(t, uint32(0x1000), d.Len())
}

func encodeDirect(b []byte, f *iu.DirectBufFields) (int, error) { return iu.DirectBuf(b).Encode(f) }

func decodeDirect(b []byte) (iu.DirectBufFields, error) {
	if err := iu.DirectBuf(b).Validate(); err != nil {
		return iu.DirectBufFields{}, err
	}
	return iu.DirectBuf(b).Fields(), nil
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
	checkLayout(t, want, in, -1,
		func(b []byte, f *iu.IndirectBufFields) (int, error) { return iu.IndirectBuf(b).Encode(f) },
		func(b []byte) (iu.IndirectBufFields, error) {
			if err := iu.IndirectBuf(b).Validate(); err != nil {
				return iu.IndirectBufFields{}, err
			}
			return iu.IndirectBuf(b).Fields(), nil
		}, iu.ErrInconsistent)

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
	require.ErrorIs(t, iu.IndirectBuf(want[:19]).Validate(), iu.ErrShortIU)
}

func TestImmBufLayout(t *testing.T) {
	// struct srp_imm_buf: __be32 len.
	b := ffBuf(6)
	n, err := iu.ImmBuf(b).Encode(8192)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, []byte{0x00, 0x00, 0x20, 0x00, 0xFF, 0xFF}, b)
	require.Equal(t, uint32(8192), iu.ImmBuf(b).Len())
	_, err = iu.ImmBuf(b[:3]).Encode(1)
	require.ErrorIs(t, err, iu.ErrShortIU)
	require.ErrorIs(t, iu.ImmBuf(b[:3]).Validate(), iu.ErrShortIU)
}

func TestDescFmtValues(t *testing.T) {
	// SRP_NO_DATA_DESC, SRP_DATA_DESC_DIRECT, SRP_DATA_DESC_INDIRECT, SRP_DATA_DESC_IMM;
	// SRP_BUF_FORMAT_DIRECT / _INDIRECT.
	for _, tc := range []struct {
		f    iu.DescFmt
		val  uint8
		name string
	}{
		{iu.DescNone, 0, "none"},
		{iu.DescDirect, 1, "direct"},
		{iu.DescIndirect, 2, "indirect"},
		{iu.DescImm, 3, "immediate"},
		{7, 7, "reserved descriptor format 7"},
	} {
		require.Equal(t, tc.val, uint8(tc.f))
		require.Equal(t, tc.name, tc.f.String())
	}
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
