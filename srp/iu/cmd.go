package iu

import (
	"encoding/binary"
	"fmt"
)

// SRP_CMD (struct srp_cmd, 48 bytes + variable part), initiator to target:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE | SOLNOT |        reserved          | BUFFMT | DO CNT | DI CNT |
//	    +--------+--------+--------------------------+--------+--------+--------+
//	 8  |                                 TAG                                   |
//	    +-----------------------------------+-----------------------------------+
//	16  |             reserved              |  LOGICAL UNIT NUMBER ...          |
//	    +-----------------------------------+--------+--------+--------+--------+
//	24  |  ... LOGICAL UNIT NUMBER          |  rsvd  |TASKATTR|  rsvd  |ADDCDBLN|
//	    +-----------------------------------+--------+--------+--------+--------+
//	32  |                             CDB (16 bytes)                            |
//	    +-----------------------------------------------------------------------+
//	48  | ADDITIONAL CDB (ADDCDBLN & 0xFC bytes)                                |
//	    | DATA-OUT descriptor (if BUFFMT >> 4 != 0)                             |
//	    | DATA-IN descriptor (if BUFFMT & 0xF != 0)                             |
//	    | ... padding ...                                                       |
//	    | IMMEDIATE DATA, from the IMMEDIATE DATA OFFSET negotiated at login    |
//	    +-----------------------------------------------------------------------+
//
// BUFFMT: bits 7:4 data-out descriptor format, bits 3:0 data-in format (DescFmt; illumos reads
// them the other way round, Linux, LIO and SCST as here). DO CNT / DI CNT: number of direct
// descriptors in the partial list of an indirect descriptor (ib_srp leaves them 0 for direct
// and immediate descriptors). ADDCDBLN: additional CDB length in 4-byte words in bits 7:2,
// bits 1:0 reserved, so the byte count is the value AND 0xFC. The first 16 bytes are the common
// header (hdr.go), with BUFFMT and the counts in the low bytes of its WORD.
const (
	cmdBufFmt         = 5
	cmdDataOutDescCnt = 6
	cmdDataInDescCnt  = 7
	cmdReserved2      = 16
	cmdLUN            = 20
	cmdReserved3      = 28
	cmdTaskAttr       = 29
	cmdReserved4      = 30
	cmdAddCDBLen      = 31
	cmdCDB            = 32
	cmdAddData        = 48
)

// CmdCDBOffset is the byte offset of the CDB field in SRP_CMD, for a caller that needs the SCSI
// operation code before Validate (to account a command to its class even when it is rejected).
const CmdCDBOffset = cmdCDB

// CDBSize is the size of the CDB field; longer CDBs continue in the additional CDB.
const CDBSize = 16

// MaxAddCDBLen is the largest additional CDB: 63 four-byte words.
const MaxAddCDBLen = 0xFC

// TaskAttr is the TASK ATTRIBUTE of SRP_CMD (bits 2:0 of byte 29).
type TaskAttr uint8

// Task attributes (SAM). ib_srp always sends TaskAttrSimple.
const (
	TaskAttrSimple      TaskAttr = 0
	TaskAttrHeadOfQueue TaskAttr = 1
	TaskAttrOrdered     TaskAttr = 2
	TaskAttrACA         TaskAttr = 4
)

// CmdFields is the content of an SRP_CMD.
type CmdFields struct {
	// SolNot holds SCSOLNT / UCSOLNT (byte 1).
	SolNot uint8
	// Tag identifies the command; echo it in the SRP_RSP, match it against ABORT TASK.
	Tag Tag
	// LUN is the 8-byte SAM LUN as a big-endian integer (byte 20 most significant).
	LUN uint64
	// TaskAttr is the task attribute (bits 2:0).
	TaskAttr TaskAttr
	// CDB is the 16-byte CDB field; a shorter CDB is zero-padded.
	CDB [CDBSize]byte
	// AddCDB is the additional CDB: a multiple of 4 bytes, at most MaxAddCDBLen.
	AddCDB []byte
	// DataOut and DataIn describe the data buffers. Only DataOut may use DescImm.
	DataOut DataBufFields
	DataIn  DataBufFields
}

// Cmd is a view of SRP_CMD.
type Cmd []byte

// Validate checks the fixed part: length, opcode and that the additional CDB fits. It does not
// look at the descriptors; DataBuffers does, and calls Validate itself.
func (b Cmd) Validate() error {
	if err := checkIU(b, OpCmd, hdrOpcode, CmdMinSize); err != nil {
		return err
	}
	if end := cmdAddData + b.AddCDBLen(); end > len(b) {
		return fmt.Errorf("srp: SRP_CMD of %d bytes with a %d-byte additional CDB: %w",
			len(b), b.AddCDBLen(), ErrShort)
	}
	return nil
}

// SolNot returns byte 1 (SCSOLNT, UCSOLNT).
func (b Cmd) SolNot() uint8 { return b[hdrSolNot] }

// DataOutFmt returns the DATA-OUT BUFFER DESCRIPTOR FORMAT (high nibble).
func (b Cmd) DataOutFmt() DescFmt { return DescFmt(b[cmdBufFmt] >> 4) }

// DataInFmt returns the DATA-IN BUFFER DESCRIPTOR FORMAT (low nibble).
func (b Cmd) DataInFmt() DescFmt { return DescFmt(b[cmdBufFmt] & 0x0F) }

// DataOutDescCnt returns the DATA-OUT BUFFER DESCRIPTOR COUNT.
func (b Cmd) DataOutDescCnt() uint8 { return b[cmdDataOutDescCnt] }

// DataInDescCnt returns the DATA-IN BUFFER DESCRIPTOR COUNT.
func (b Cmd) DataInDescCnt() uint8 { return b[cmdDataInDescCnt] }

// Tag returns the TAG.
func (b Cmd) Tag() Tag { return hdrTagOf(b) }

// LUN returns the LOGICAL UNIT NUMBER as a big-endian integer.
func (b Cmd) LUN() uint64 { return binary.BigEndian.Uint64(b[cmdLUN:]) }

// TaskAttr returns the TASK ATTRIBUTE.
func (b Cmd) TaskAttr() TaskAttr { return TaskAttr(b[cmdTaskAttr] & 0x07) }

// AddCDBLen returns the ADDITIONAL CDB LENGTH in bytes.
func (b Cmd) AddCDBLen() int { return int(b[cmdAddCDBLen] & 0xFC) }

// CDB returns the whole CDB in place: the 16-byte CDB field followed by the additional CDB,
// which are contiguous in the IU. Call Validate first.
func (b Cmd) CDB() []byte { return b[cmdCDB : cmdAddData+b.AddCDBLen()] }

// CmdLen returns the length of the SRP_CMD that Encode writes for f.
func CmdLen(f *CmdFields) (int, error) {
	if len(f.AddCDB)%4 != 0 || len(f.AddCDB) > MaxAddCDBLen {
		return 0, fmt.Errorf("srp: additional CDB of %d bytes is not a multiple of 4 up to %d: %w",
			len(f.AddCDB), MaxAddCDBLen, ErrInvalidField)
	}
	if f.DataIn.Format == DescImm {
		return 0, fmt.Errorf("srp: immediate data-in: %w", ErrInvalidField)
	}
	outLen, err := f.DataOut.descLen()
	if err != nil {
		return 0, err
	}
	inLen, err := f.DataIn.descLen()
	if err != nil {
		return 0, err
	}
	n := cmdAddData + len(f.AddCDB) + outLen + inLen
	if f.DataOut.Format != DescImm {
		return n, nil
	}
	if int(f.DataOut.ImmDataOffset) < n {
		return 0, fmt.Errorf("srp: immediate data offset %d inside the %d bytes of header and descriptors: %w",
			f.DataOut.ImmDataOffset, n, ErrInvalidField)
	}
	return int(f.DataOut.ImmDataOffset) + len(f.DataOut.ImmData), nil
}

// Encode writes the SRP_CMD with additional CDB, descriptors (data-out first) and immediate
// data into b and returns its length. Bytes between the descriptors and the immediate data
// are zeroed. Counts and lengths are written as given, so Encode can also build the
// inconsistent commands that tests feed to DataBuffers.
func (b Cmd) Encode(f *CmdFields) (int, error) {
	n, err := CmdLen(f)
	if err != nil {
		return 0, err
	}
	if err := checkBuf(b, OpCmd, n); err != nil {
		return 0, err
	}
	putHdr(b, OpCmd, f.SolNot, 0, f.Tag)
	b[cmdBufFmt] = byte(f.DataOut.Format)<<4 | byte(f.DataIn.Format)
	b[cmdDataOutDescCnt] = f.DataOut.DescCnt
	b[cmdDataInDescCnt] = f.DataIn.DescCnt
	clear(b[cmdReserved2:cmdLUN])
	binary.BigEndian.PutUint64(b[cmdLUN:], f.LUN)
	b[cmdReserved3] = 0
	b[cmdTaskAttr] = byte(f.TaskAttr & 0x07)
	b[cmdReserved4] = 0
	b[cmdAddCDBLen] = byte(len(f.AddCDB))
	copy(b[cmdCDB:cmdAddData], f.CDB[:])
	off := cmdAddData + copy(b[cmdAddData:], f.AddCDB)
	for _, d := range [...]*DataBufFields{&f.DataOut, &f.DataIn} {
		off += d.encodeDesc(b[off:])
	}
	if f.DataOut.Format == DescImm {
		imm := int(f.DataOut.ImmDataOffset)
		clear(b[off:imm])
		copy(b[imm:n], f.DataOut.ImmData)
	}
	return n, nil
}
