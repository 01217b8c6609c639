package srptest

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
)

// fakePD hands out regions with predictable addresses and keys: region k (from 1) has address
// (0x10 + k) << 40 | 0x200 and rkey 0xCAFE0000 | k.
type fakePD struct {
	n    int
	live map[*fakeMR]bool
}

type fakeMR struct {
	pd     *fakePD
	buf    []byte
	k      int
	access ib.Access
}

func newFakePD() *fakePD { return &fakePD{live: make(map[*fakeMR]bool)} }

func (p *fakePD) RegisterMemory(buf []byte, access ib.Access) (ib.MR, error) {
	p.n++
	m := &fakeMR{pd: p, buf: buf, k: p.n, access: access}
	p.live[m] = true
	return m, nil
}

func (m *fakeMR) Bytes() []byte     { return m.buf }
func (m *fakeMR) Addr() uint64      { return uint64(0x10+m.k)<<40 | 0x200 }
func (m *fakeMR) Len() int          { return len(m.buf) }
func (m *fakeMR) LKey() uint32      { return 0xBEEF0000 | uint32(m.k) }
func (m *fakeMR) RKey() uint32      { return 0xCAFE0000 | uint32(m.k) }
func (m *fakeMR) Access() ib.Access { return m.access }
func (m *fakeMR) Deregister() error { delete(m.pd.live, m); return nil }

// descBytes is a struct srp_direct_buf for fake region k of length n.
func descBytes(k int, n uint32) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(0x10+k)<<40|0x200)
	binary.BigEndian.PutUint32(b[8:], 0xCAFE0000|uint32(k))
	binary.BigEndian.PutUint32(b[12:], n)
	return b
}

// descRun is descBytes of regions first to last, each of length n, one after the other.
func descRun(first, last int, n uint32) []byte {
	var b []byte
	for k := first; k <= last; k++ {
		b = append(b, descBytes(k, n)...)
	}
	return b
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

var defaultNeg = negotiated{immGranted: true, immOffset: 68, maxITIULen: 8260, cmdSGEntries: 12}

// header is the fixed part of struct srp_cmd as ib_srp fills it for tag 0x0200010000000000
// (hardware queue 1, tag 2): opcode, sol_not 0, reserved, buf_fmt, counts, tag, reserved,
// LUN, reserved, task_attr, reserved, add_cdb_len, then the CDB.
func header(bufFmt, outCnt, inCnt byte, lun []byte, addCDBLen byte, cdb []byte) []byte {
	h := []byte{
		0x02, 0x00, 0, 0, 0, bufFmt, outCnt, inCnt,
		0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // tag
		0, 0, 0, 0, // reserved
	}
	h = append(h, lun...)
	h = append(h, 0, 0, 0, addCDBLen)
	c := make([]byte, 16)
	copy(c, cdb)
	return append(h, c...)
}

var lun0 = []byte{0, 0, 0, 0, 0, 0, 0, 0}

func TestBuildCmd(t *testing.T) {
	read10 := []byte{0x28, 0, 0, 0, 0, 8, 0, 0, 8, 0}
	write10 := []byte{0x2a, 0, 0, 0, 0, 8, 0, 0, 1, 0}
	imm := testutil.Pattern(512, 3)
	big := testutil.Pattern(8193, 4)
	tenBytes := testutil.Pattern(10, 5)
	twenty := testutil.Pattern(20, 6)
	for _, tc := range []struct {
		name string
		neg  negotiated
		req  Request
		want []byte
		// mrs are the regions that must be registered, by fake index: access and length.
		mrs []ib.Access
	}{
		{
			name: "no data",
			req:  Request{CDB: []byte{0x00, 0, 0, 0, 0, 0}},
			want: header(0x00, 0, 0, lun0, 0, []byte{0x00, 0, 0, 0, 0, 0}),
		},
		{
			name: "read, direct (ib_srp with one fast-registered region, counts 0)",
			req:  Request{LUN: 1, CDB: read10, DataInLen: 4096},
			want: cat(header(0x01, 0, 0, []byte{0, 1, 0, 0, 0, 0, 0, 0}, 0, read10),
				[]byte{0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x02, 0x00, 0xCA, 0xFE, 0x00, 0x01, 0x00, 0x00, 0x10, 0x00}),
			mrs: []ib.Access{accessDataIn},
		},
		{
			name: "write that fits: immediate data at offset 68",
			req:  Request{CDB: write10, DataOut: imm},
			want: cat(header(0x30, 0, 0, lun0, 0, write10),
				[]byte{0x00, 0x00, 0x02, 0x00}, // struct srp_imm_buf: len 512
				make([]byte, 16),               // up to SRP_IMM_DATA_OFFSET
				imm),
		},
		{
			name: "write of 8193 bytes: 68 + 8193 > 8260, direct",
			req:  Request{CDB: write10, DataOut: big},
			want: cat(header(0x10, 0, 0, lun0, 0, write10), descBytes(1, 8193)),
			mrs:  []ib.Access{accessDataOut},
		},
		{
			name: "write, immediate data not granted: direct",
			neg:  negotiated{immOffset: 68, maxITIULen: 276, cmdSGEntries: 12},
			req:  Request{CDB: write10, DataOut: imm},
			want: cat(header(0x10, 0, 0, lun0, 0, write10), descBytes(1, 512)),
			mrs:  []ib.Access{accessDataOut},
		},
		{
			name: "write, explicit direct",
			req:  Request{CDB: write10, DataOut: imm, Layout: Direct{}},
			want: cat(header(0x10, 0, 0, lun0, 0, write10), descBytes(1, 512)),
			mrs:  []ib.Access{accessDataOut},
		},
		{
			name: "read, indirect 3: pieces 4+3+3, table registered after them",
			req:  Request{CDB: read10, DataInLen: 10, Layout: Indirect{N: 3}},
			want: cat(header(0x02, 0, 3, lun0, 0, read10),
				descBytes(4, 48),             // table descriptor: region 4, 3 x 16 bytes
				[]byte{0x00, 0x00, 0x00, 10}, // TOTAL LENGTH
				descBytes(1, 4), descBytes(2, 3), descBytes(3, 3)),
			mrs: []ib.Access{accessDataIn, accessDataIn, accessDataIn, accessTable},
		},
		{
			name: "write, indirect 1",
			req:  Request{CDB: write10, DataOut: tenBytes, Layout: Indirect{N: 1}},
			want: cat(header(0x20, 1, 0, lun0, 0, write10),
				descBytes(2, 16), []byte{0, 0, 0, 10}, descBytes(1, 10)),
			mrs: []ib.Access{accessDataOut, accessTable},
		},
		{
			name: "write, external: 14 regions, 12 in the IU, 224-byte table",
			neg:  negotiated{immGranted: true, immOffset: 68, maxITIULen: 8260, cmdSGEntries: 12, allowExtSG: true},
			req:  Request{CDB: write10, DataOut: twenty, Layout: External{N: 14}},
			want: cat(header(0x20, 12, 0, lun0, 0, write10),
				descBytes(15, 224), []byte{0, 0, 0, 20},
				// 20 bytes in 14 pieces: 6 of 2 bytes, 8 of 1 byte.
				descRun(1, 6, 2), descRun(7, 12, 1)),
			mrs: append(repeat(accessDataOut, 14), accessTable),
		},
		{
			name: "read, indirect 13 with allow_ext_sg is external too",
			neg:  negotiated{cmdSGEntries: 12, allowExtSG: true},
			req:  Request{CDB: read10, DataInLen: 13, Layout: Indirect{N: 13}},
			want: cat(header(0x02, 0, 12, lun0, 0, read10),
				descBytes(14, 208), []byte{0, 0, 0, 13},
				descRun(1, 12, 1)),
			mrs: append(repeat(accessDataIn, 13), accessTable),
		},
		{
			name: "explicit immediate",
			req:  Request{CDB: write10, DataOut: tenBytes, Layout: Immediate{}},
			want: cat(header(0x30, 0, 0, lun0, 0, write10), []byte{0, 0, 0, 10}, make([]byte, 16), tenBytes),
		},
		{
			name: "bidirectional, direct: data-out descriptor first",
			req:  Request{CDB: write10, DataOut: tenBytes, DataInLen: 7, Layout: Direct{}},
			want: cat(header(0x11, 0, 0, lun0, 0, write10), descBytes(1, 10), descBytes(2, 7)),
			mrs:  []ib.Access{accessDataOut, accessDataIn},
		},
		{
			// The immediate descriptor (4 bytes) and the data-in direct descriptor (16) end at
			// byte 68 exactly, where the immediate data starts.
			name: "bidirectional, immediate: data-in direct",
			req:  Request{CDB: write10, DataOut: tenBytes, DataInLen: 7, Layout: Immediate{}},
			want: cat(header(0x31, 0, 0, lun0, 0, write10), []byte{0, 0, 0, 10}, descBytes(1, 7), tenBytes),
			mrs:  []ib.Access{accessDataIn},
		},
		{
			name: "LUN 300 (flat space), ordered, 18-byte CDB padded to 20",
			req: Request{LUN: 300, Attr: iu.TaskAttrOrdered,
				CDB: []byte{0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
			want: func() []byte {
				h := header(0x00, 0, 0, []byte{0x41, 0x2c, 0, 0, 0, 0, 0, 0}, 4,
					[]byte{0x7f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
				h[29] = 0x02 // ORDERED
				return append(h, 16, 17, 0, 0)
			}(),
		},
		{
			name: "raw LUN",
			req:  Request{RawLUN: 0x0001000200030004, CDB: []byte{0x00}},
			want: header(0x00, 0, 0, []byte{0, 1, 0, 2, 0, 3, 0, 4}, 0, []byte{0x00}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			neg := tc.neg
			if neg.cmdSGEntries == 0 {
				neg = defaultNeg
			}
			pd := newFakePD()
			b, err := prepareCmd(pd, &neg, &tc.req, LinuxTag(1<<16|2))
			require.NoError(t, err)
			buf := make([]byte, 9000)
			n, err := iu.Cmd(buf).Encode(&b.fields)
			require.NoError(t, err)
			require.Equal(t, tc.want, buf[:n])

			// The regions registered, in order, with the access they need.
			require.Len(t, b.mrs, len(tc.mrs))
			for i, mr := range b.mrs {
				require.Equal(t, tc.mrs[i], mr.Access(), "region %d", i)
			}
			// The target parses what we built, and the data buffers add up.
			out, in, err := iu.Cmd(buf[:n]).DataBuffers(neg.immOffset)
			require.NoError(t, err)
			require.Equal(t, uint32(len(tc.req.DataOut)), out.Len())
			require.Equal(t, uint32(tc.req.DataInLen), in.Len())
			b.release()
			require.Empty(t, pd.live, "everything deregistered")
		})
	}
}

func repeat(a ib.Access, n int) []ib.Access {
	s := make([]ib.Access, n)
	for i := range s {
		s[i] = a
	}
	return s
}

// The descriptor table of an external layout is in initiator memory in full.
func TestExternalTableContents(t *testing.T) {
	pd := newFakePD()
	neg := negotiated{cmdSGEntries: 2, allowExtSG: true}
	b, err := prepareCmd(pd, &neg, &Request{CDB: []byte{0x28}, DataInLen: 5, Layout: External{N: 4}}, 1)
	require.NoError(t, err)
	table := b.mrs[4].Bytes()
	require.Equal(t, cat(descBytes(1, 2), descBytes(2, 1), descBytes(3, 1), descBytes(4, 1)), table)
	require.Equal(t, uint8(2), b.fields.DataIn.DescCnt)
	b.release()
}

func TestBuildCmdRejects(t *testing.T) {
	noImm := negotiated{immOffset: 68, maxITIULen: 276, cmdSGEntries: 12}
	small := negotiated{immGranted: true, immOffset: 68, maxITIULen: 100, cmdSGEntries: 12}
	for _, tc := range []struct {
		name string
		neg  negotiated
		req  Request
		err  error
	}{
		{"13 descriptors without allow_ext_sg", defaultNeg, Request{DataInLen: 100, Layout: Indirect{N: 13}}, ErrSGListTooLong},
		{"external without allow_ext_sg", defaultNeg, Request{DataInLen: 100, Layout: External{N: 13}}, ErrSGListTooLong},
		{"external that fits the IU", negotiated{cmdSGEntries: 12, allowExtSG: true}, Request{DataInLen: 100, Layout: External{N: 12}}, ErrConfig},
		{"indirect 0", defaultNeg, Request{DataInLen: 100, Layout: Indirect{N: 0}}, ErrConfig},
		{"more regions than bytes", defaultNeg, Request{DataOut: []byte{1, 2, 3}, Layout: Indirect{N: 4}}, ErrConfig},
		{"immediate not granted", noImm, Request{DataOut: []byte{1}, Layout: Immediate{}}, ErrConfig},
		{"immediate too long", small, Request{DataOut: make([]byte, 33), Layout: Immediate{}}, ErrConfig},
		{"negative data-in length", defaultNeg, Request{DataInLen: -1}, ErrConfig},
		{"CDB of 269 bytes", defaultNeg, Request{CDB: make([]byte, 269)}, ErrConfig},
		{"data-out OK, data-in fails: nothing stays registered", defaultNeg,
			Request{DataOut: make([]byte, 10), DataInLen: 2, Layout: Indirect{N: 3}}, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := newFakePD()
			_, err := prepareCmd(pd, &tc.neg, &tc.req, 1)
			require.ErrorIs(t, err, tc.err)
			require.Empty(t, pd.live)
		})
	}
	// Immediate exactly at the limit fits: 68 + 32 = 100.
	pd := newFakePD()
	b, err := prepareCmd(pd, &small, &Request{DataOut: make([]byte, 32), Layout: Immediate{}}, 1)
	require.NoError(t, err)
	require.Equal(t, iu.DescImm, b.fields.DataOut.Format)
}
