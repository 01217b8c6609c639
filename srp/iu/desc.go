package iu

import (
	"encoding/binary"
	"fmt"
)

// DescFmt is a data buffer descriptor format: one nibble of SRP_CMD's BUFFER FORMATS byte
// (high nibble data-out, low nibble data-in).
type DescFmt uint8

// Descriptor formats (include/scsi/srp.h).
const (
	DescNone     DescFmt = 0 // SRP_NO_DATA_DESC: no data in this direction
	DescDirect   DescFmt = 1 // SRP_DATA_DESC_DIRECT: one direct descriptor
	DescIndirect DescFmt = 2 // SRP_DATA_DESC_INDIRECT: an indirect descriptor
	DescImm      DescFmt = 3 // SRP_DATA_DESC_IMM (SRP-2): immediate data, data-out only
)

// String names the format for logs.
func (f DescFmt) String() string { return nameOr(descFmtNames, f, "reserved descriptor format %d") }

var descFmtNames = map[DescFmt]string{DescNone: "none", DescDirect: "direct", DescIndirect: "indirect", DescImm: "immediate"}

// Descriptor sizes (struct srp_direct_buf, struct srp_indirect_buf without its list,
// struct srp_imm_buf).
const (
	DirectBufSize         = 16
	IndirectBufHeaderSize = 20
	ImmBufSize            = 4
)

// Direct data buffer descriptor (struct srp_direct_buf, 16 bytes): one remote memory region
// that the target reads (RDMA READ, data-out) or writes (RDMA WRITE, data-in):
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  |                           VIRTUAL ADDRESS                             |
//	   +-----------------------------------+-----------------------------------+
//	8  |  MEMORY HANDLE (R_Key)            |  DATA LENGTH                      |
//	   +-----------------------------------+-----------------------------------+
//
// For ib_srp the address is an MR IOVA or a DMA address, not a CPU address.
const (
	directBufVA  = 0
	directBufKey = 8
	directBufLen = 12
)

// DirectBufFields is the content of a direct data buffer descriptor.
type DirectBufFields struct {
	VA  uint64
	Key uint32
	Len uint32
}

// DirectBuf is a view of a direct data buffer descriptor.
type DirectBuf []byte

// VA returns the VIRTUAL ADDRESS.
func (d DirectBuf) VA() uint64 { return binary.BigEndian.Uint64(d[directBufVA:]) }

// Key returns the MEMORY HANDLE (the R_Key to use for the RDMA operation).
func (d DirectBuf) Key() uint32 { return binary.BigEndian.Uint32(d[directBufKey:]) }

// Len returns the DATA LENGTH in bytes.
func (d DirectBuf) Len() uint32 { return binary.BigEndian.Uint32(d[directBufLen:]) }

// Fields returns all fields.
func (d DirectBuf) Fields() DirectBufFields {
	return DirectBufFields{VA: d.VA(), Key: d.Key(), Len: d.Len()}
}

// Encode writes the 16-byte descriptor into d and returns DirectBufSize. It panics if d is
// shorter, as encoding/binary's Put functions do.
func (d DirectBuf) Encode(f *DirectBufFields) int {
	_ = d[DirectBufSize-1] // the one bounds check; panics if d is short
	binary.BigEndian.PutUint64(d[directBufVA:], f.VA)
	binary.BigEndian.PutUint32(d[directBufKey:], f.Key)
	binary.BigEndian.PutUint32(d[directBufLen:], f.Len)
	return DirectBufSize
}

// Indirect data buffer descriptor (struct srp_indirect_buf, 20 + 16n bytes): the data is
// scattered over several regions listed in a descriptor table in initiator memory:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  |          INDIRECT TABLE DESCRIPTOR (direct descriptor of the table)   |
//	 8  |                                                                       |
//	    +-----------------------------------+-----------------------------------+
//	16  |  TOTAL LENGTH                     |  PARTIAL MEMORY DESCRIPTOR LIST   |
//	    +-----------------------------------+  (n direct descriptors) ...       |
//	24  |                                                                       |
//
// The table descriptor's length is 16 x (descriptors in the whole table); the partial list
// repeats the first n of them, n being the SRP_CMD's descriptor count for that direction. When
// the table has more than n entries, the rest must be fetched from the initiator with an
// RDMA READ of the table (ib_srp does this only with allow_ext_sg=1; LIO, SCST and illumos
// refuse such commands).
const (
	indirectBufTable    = 0
	indirectBufTotalLen = 16
	indirectBufDescs    = 20
)

// IndirectBufFields is the content of an indirect data buffer descriptor.
type IndirectBufFields struct {
	// Table locates the whole descriptor table in initiator memory.
	Table DirectBufFields
	// TotalLen is the sum of the lengths of all descriptors in the table.
	TotalLen uint32
	// Descs is the partial memory descriptor list carried in the IU.
	Descs []DirectBufFields
}

// IndirectBuf is a view of an indirect data buffer descriptor, its length covering exactly the
// partial descriptor list.
type IndirectBuf []byte

// Table returns the INDIRECT TABLE DESCRIPTOR.
func (d IndirectBuf) Table() DirectBuf { return DirectBuf(d[indirectBufTable:indirectBufTotalLen]) }

// TotalLen returns the TOTAL LENGTH.
func (d IndirectBuf) TotalLen() uint32 { return binary.BigEndian.Uint32(d[indirectBufTotalLen:]) }

// NumDescs returns the number of descriptors in the partial list held by the view.
func (d IndirectBuf) NumDescs() int { return (len(d) - IndirectBufHeaderSize) / DirectBufSize }

// DescAt returns descriptor i of the partial list; it panics if i is out of range.
func (d IndirectBuf) DescAt(i int) DirectBuf {
	if i < 0 || i >= d.NumDescs() {
		panic(fmt.Sprintf("srp: IndirectBuf.DescAt(%d) with %d descriptors", i, d.NumDescs()))
	}
	off := indirectBufDescs + i*DirectBufSize
	return DirectBuf(d[off : off+DirectBufSize])
}

// Fields returns all fields; Descs is nil when the partial list is empty.
func (d IndirectBuf) Fields() IndirectBufFields {
	f := IndirectBufFields{Table: d.Table().Fields(), TotalLen: d.TotalLen()}
	if n := d.NumDescs(); n > 0 {
		f.Descs = make([]DirectBufFields, n)
		for i := range f.Descs {
			f.Descs[i] = d.DescAt(i).Fields()
		}
	}
	return f
}

// IndirectBufLen returns the encoded length of f: 20 + 16 x len(f.Descs).
func IndirectBufLen(f *IndirectBufFields) int {
	return IndirectBufHeaderSize + DirectBufSize*len(f.Descs)
}

// Encode writes the indirect descriptor with its partial list into d and returns its length,
// IndirectBufLen(f). It panics if d is shorter, as encoding/binary's Put functions do.
func (d IndirectBuf) Encode(f *IndirectBufFields) int {
	n := IndirectBufLen(f)
	_ = d[n-1] // the one bounds check; panics if d is short
	DirectBuf(d[indirectBufTable:]).Encode(&f.Table)
	binary.BigEndian.PutUint32(d[indirectBufTotalLen:], f.TotalLen)
	for i := range f.Descs {
		DirectBuf(d[indirectBufDescs+i*DirectBufSize:]).Encode(&f.Descs[i])
	}
	return n
}

// ImmBuf is a view of the SRP-2 immediate data buffer descriptor (struct srp_imm_buf, 4 bytes):
// the DATA LENGTH of the data-out bytes carried in the SRP_CMD itself, starting at the
// IMMEDIATE DATA OFFSET negotiated at login (not necessarily right after the descriptor).
type ImmBuf []byte

// Len returns the DATA LENGTH.
func (d ImmBuf) Len() uint32 { return binary.BigEndian.Uint32(d) }

// Encode writes the 4-byte descriptor into d and returns ImmBufSize. It panics if d is
// shorter, as encoding/binary's Put functions do.
func (d ImmBuf) Encode(length uint32) int {
	binary.BigEndian.PutUint32(d, length)
	return ImmBufSize
}

// DataBuf is one direction (data-out or data-in) of an SRP_CMD after Cmd.DataBuffers located
// and checked its descriptor: everything the data path needs to move the data, as views into
// the IU, so walking a command allocates nothing. Its methods take a pointer: the struct is
// large enough that copying it for every call (as the compiler does for a method on a value
// reached through a pointer) shows in the instructions the data path spends per command.
type DataBuf struct {
	format DescFmt
	cnt    uint8  // the descriptor count byte of the SRP_CMD for this direction
	desc   []byte // the descriptor as it appears in the IU; nil for DescNone
	ndesc  int    // direct descriptors carried in the IU
	data   []byte // immediate data (DescImm)
	immOff uint16 // immediate data offset the command was parsed with (DescImm)
	ext    bool   // indirect table larger than the partial list
}

// Format returns the descriptor format.
func (d *DataBuf) Format() DescFmt { return d.format }

// Present reports whether the command transfers data in this direction.
func (d *DataBuf) Present() bool { return d.format != DescNone }

// Descriptor returns the descriptor bytes as carried in the IU (16 bytes direct, 20 + 16n
// indirect, 4 immediate, nil none).
func (d *DataBuf) Descriptor() []byte { return d.desc }

// Len returns the data transfer length in bytes: the direct descriptor's length, the indirect
// descriptor's TOTAL LENGTH, or the immediate data length.
func (d *DataBuf) Len() uint32 {
	switch d.format {
	case DescDirect:
		return DirectBuf(d.desc).Len()
	case DescIndirect:
		return IndirectBuf(d.desc).TotalLen()
	case DescImm:
		return ImmBuf(d.desc).Len()
	}
	return 0
}

// NumDescriptors returns how many direct descriptors the IU itself carries for this direction:
// 1 for direct, the partial list length for indirect, 0 otherwise. When External is true the
// table holds TableLen() descriptors and only the first NumDescriptors are available here.
func (d *DataBuf) NumDescriptors() int { return d.ndesc }

// DescriptorAt returns direct descriptor i (0 <= i < NumDescriptors) in place. It panics if i
// is out of range, like a slice index.
func (d *DataBuf) DescriptorAt(i int) DirectBuf {
	if i < 0 || i >= d.ndesc {
		panic(fmt.Sprintf("srp: DataBuf.DescriptorAt(%d) with %d descriptors", i, d.ndesc))
	}
	if d.format == DescDirect {
		return DirectBuf(d.desc)
	}
	off := indirectBufDescs + i*DirectBufSize
	return DirectBuf(d.desc[off : off+DirectBufSize])
}

// External reports whether an indirect descriptor's table has more entries than the partial
// list in the IU, so that the table must be fetched with an RDMA READ of TableDescriptor
// before the data can move.
func (d *DataBuf) External() bool { return d.ext }

// TableDescriptor returns the indirect descriptor's INDIRECT TABLE DESCRIPTOR (location and
// length of the whole table in initiator memory), or nil for other formats.
func (d *DataBuf) TableDescriptor() DirectBuf {
	if d.format != DescIndirect {
		return nil
	}
	return IndirectBuf(d.desc).Table()
}

// TableLen returns the number of direct descriptors describing the data: the whole table for
// indirect (table length / 16), 1 for direct, 0 otherwise.
func (d *DataBuf) TableLen() int {
	switch d.format {
	case DescDirect:
		return 1
	case DescIndirect:
		return int(IndirectBuf(d.desc).Table().Len() / DirectBufSize)
	}
	return 0
}

// ImmediateData returns the immediate data in place (DescImm), nil otherwise. It aliases the
// receive buffer, which therefore stays busy until the command is done with it.
func (d *DataBuf) ImmediateData() []byte { return d.data }

// DataBufFields is the content of one direction of an SRP_CMD, for Cmd.Encode and Cmd.Fields.
type DataBufFields struct {
	// Format selects which of the fields below are used.
	Format DescFmt
	// DescCnt is the DATA-OUT / DATA-IN BUFFER DESCRIPTOR COUNT byte, written verbatim. A valid
	// command has len(Indirect.Descs) for DescIndirect, 0 for DescNone, and 0 (what ib_srp
	// sends) or 1 for DescDirect and DescImm.
	DescCnt uint8
	// Direct is the descriptor for DescDirect.
	Direct DirectBufFields
	// Indirect is the descriptor and partial list for DescIndirect.
	Indirect IndirectBufFields
	// ImmDataOffset is where ImmData starts, from IU byte 0 (the offset negotiated at login),
	// for DescImm.
	ImmDataOffset uint16
	// ImmData is the immediate data for DescImm; its length goes in the descriptor.
	ImmData []byte
}

// Fields returns the content as DataBufFields; variable parts are copies.
func (d *DataBuf) Fields() DataBufFields {
	f := DataBufFields{Format: d.format, DescCnt: d.cnt}
	switch d.format {
	case DescDirect:
		f.Direct = DirectBuf(d.desc).Fields()
	case DescIndirect:
		f.Indirect = IndirectBuf(d.desc).Fields()
	case DescImm:
		f.ImmDataOffset = d.immOff
		f.ImmData = cloneBytes(d.data)
	}
	return f
}

// descLen is the size of f's descriptor in the IU.
func (f *DataBufFields) descLen() (int, error) {
	switch f.Format {
	case DescNone:
		return 0, nil
	case DescDirect:
		return DirectBufSize, nil
	case DescIndirect:
		if len(f.Indirect.Descs) > 255 {
			return 0, fmt.Errorf("srp: %d partial descriptors, at most 255 fit the count byte: %w",
				len(f.Indirect.Descs), ErrInvalidField)
		}
		return IndirectBufLen(&f.Indirect), nil
	case DescImm:
		if uint64(len(f.ImmData)) > maxUint32 {
			return 0, fmt.Errorf("srp: %d bytes of immediate data: %w", len(f.ImmData), ErrInvalidField)
		}
		return ImmBufSize, nil
	}
	return 0, fmt.Errorf("srp: descriptor format %d does not fit a nibble: %w", uint8(f.Format), ErrInvalidField)
}

// encodeDesc writes f's descriptor at b[0:] and returns its size (the caller checked it fits
// with descLen).
func (f *DataBufFields) encodeDesc(b []byte) int {
	switch f.Format {
	case DescDirect:
		return DirectBuf(b).Encode(&f.Direct)
	case DescIndirect:
		return IndirectBuf(b).Encode(&f.Indirect)
	case DescImm:
		return ImmBuf(b).Encode(uint32(len(f.ImmData)))
	}
	return 0
}
