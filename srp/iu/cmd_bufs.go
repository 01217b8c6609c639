package iu

import "fmt"

// Decoding an SRP_CMD's data buffer descriptors: the walk that the data path makes once per
// command (ParseDataBuffers), with the checks that keep a malformed IU from being read past its
// end, and Fields, which copies a whole command out for tests and tracing.

// DataBuffers locates and checks the data-out and data-in descriptors of the command. It is
// the one decoder the data path needs per SRP_CMD: it validates the fixed part, then walks the
// descriptors, which follow the additional CDB, data-out first. immDataOffset is the
// IMMEDIATE DATA OFFSET granted at login, or 0 if immediate data was not granted.
//
// It returns an error, never panics, and allocates nothing on success, when:
//   - the IU is shorter than its descriptors (ErrShort);
//   - a format is reserved, DescImm is used for data-in or was not negotiated
//     (ErrUnsupportedFormat);
//   - a descriptor count disagrees with the format (must be 0 for none, 0 or 1 for direct and
//     immediate), the IU is longer than its descriptors (or than its immediate data), an
//     indirect table length is zero or not a multiple of 16, the partial list is longer than
//     the table, the partial list's lengths do not add up to TOTAL LENGTH (or exceed it for an
//     external table), or the descriptors overlap the immediate data (ErrInconsistent).
//
// The IU length must be the received byte count exactly, not the receive buffer size.
func (b Cmd) DataBuffers(immDataOffset uint16) (out, in DataBuf, err error) {
	err = b.ParseDataBuffers(immDataOffset, &out, &in)
	return out, in, err
}

// ParseDataBuffers is DataBuffers writing the two directions into *out and *in, where the
// data path keeps them, instead of returning copies. On error both are zero.
func (b Cmd) ParseDataBuffers(immDataOffset uint16, out, in *DataBuf) error {
	*out, *in = DataBuf{}, DataBuf{}
	if err := b.Validate(); err != nil {
		return err
	}
	off := cmdAddData + b.AddCDBLen()
	if b.DataInFmt() == DescImm {
		return fmt.Errorf("srp: SRP_CMD tag %#x: immediate data-in: %w", b.Tag(), ErrUnsupportedFormat)
	}
	off, err := b.dataBuf(out, off, b.DataOutFmt(), b.DataOutDescCnt(), "data-out")
	if err == nil {
		off, err = b.dataBuf(in, off, b.DataInFmt(), b.DataInDescCnt(), "data-in")
	}
	if err == nil {
		err = b.checkEnd(out, off, immDataOffset)
	}
	if err != nil {
		*out, *in = DataBuf{}, DataBuf{}
	}
	return err
}

// checkEnd checks that the descriptors, ending at byte off, fill the IU, or are followed by
// immediate data at immDataOffset that does, and locates that data in out.
func (b Cmd) checkEnd(out *DataBuf, off int, immDataOffset uint16) error {
	if out.format != DescImm {
		if off != len(b) {
			return fmt.Errorf("srp: SRP_CMD tag %#x: descriptors end at byte %d of a %d-byte IU: %w",
				b.Tag(), off, len(b), ErrInconsistent)
		}
		return nil
	}
	if immDataOffset == 0 {
		return fmt.Errorf("srp: SRP_CMD tag %#x: immediate data was not negotiated: %w",
			b.Tag(), ErrUnsupportedFormat)
	}
	if off > int(immDataOffset) {
		return fmt.Errorf("srp: SRP_CMD tag %#x: descriptors end at byte %d, after the immediate data offset %d: %w",
			b.Tag(), off, immDataOffset, ErrInconsistent)
	}
	// 64-bit sum: a 32-bit length of 0xFFFFFFFF must not wrap (the 2025 LIO fix).
	end := uint64(immDataOffset) + uint64(ImmBuf(out.desc).Len())
	if end != uint64(len(b)) {
		return fmt.Errorf("srp: SRP_CMD tag %#x: %d bytes of immediate data at offset %d in a %d-byte IU: %w",
			b.Tag(), ImmBuf(out.desc).Len(), immDataOffset, len(b), ErrInconsistent)
	}
	out.data = b[immDataOffset:end]
	out.immOff = immDataOffset
	return nil
}

// dataBuf checks the descriptor of one direction at b[off:], sets d (zero on entry) to it and
// returns the offset of the next descriptor.
func (b Cmd) dataBuf(d *DataBuf, off int, format DescFmt, cnt uint8, dir string) (int, error) {
	d.format, d.cnt = format, cnt
	var size int
	switch format {
	case DescNone:
		if cnt != 0 {
			return 0, fmt.Errorf("srp: SRP_CMD tag %#x: %s descriptor count %d without a %s descriptor: %w",
				b.Tag(), dir, cnt, dir, ErrInconsistent)
		}
		return off, nil
	case DescDirect, DescImm:
		if cnt > 1 {
			return 0, fmt.Errorf("srp: SRP_CMD tag %#x: %s descriptor count %d for a single %v descriptor: %w",
				b.Tag(), dir, cnt, format, ErrInconsistent)
		}
		size = DirectBufSize
		if format == DescImm {
			size = ImmBufSize
		} else {
			d.ndesc = 1
		}
	case DescIndirect:
		size = IndirectBufHeaderSize + int(cnt)*DirectBufSize
	default:
		return 0, fmt.Errorf("srp: SRP_CMD tag %#x: %s %v: %w", b.Tag(), dir, format, ErrUnsupportedFormat)
	}
	if off+size > len(b) {
		return 0, fmt.Errorf("srp: SRP_CMD tag %#x: %d-byte %s %v descriptor at byte %d of a %d-byte IU: %w",
			b.Tag(), size, dir, format, off, len(b), ErrShort)
	}
	d.desc = b[off : off+size]
	if format == DescIndirect {
		if err := d.checkIndirect(b.Tag(), dir); err != nil {
			return 0, err
		}
	}
	return off + size, nil
}

// checkIndirect checks an indirect descriptor whose partial list is d.desc[20:] and sets
// ndesc and ext.
func (d *DataBuf) checkIndirect(tag Tag, dir string) error {
	ib := IndirectBuf(d.desc)
	n := ib.NumDescs()
	tableLen := ib.Table().Len()
	if tableLen == 0 || tableLen%DirectBufSize != 0 {
		return fmt.Errorf("srp: SRP_CMD tag %#x: %s indirect table length %d is not a non-zero multiple of %d: %w",
			tag, dir, tableLen, DirectBufSize, ErrInconsistent)
	}
	tableN := int(tableLen / DirectBufSize)
	if n > tableN {
		return fmt.Errorf("srp: SRP_CMD tag %#x: %s partial list of %d descriptors exceeds the table of %d: %w",
			tag, dir, n, tableN, ErrInconsistent)
	}
	var sum uint64
	for i := 0; i < n; i++ {
		sum += uint64(ib.DescAt(i).Len())
	}
	d.ndesc = n
	d.ext = tableN > n
	total := uint64(ib.TotalLen())
	if (!d.ext && sum != total) || (d.ext && sum > total) {
		return fmt.Errorf("srp: SRP_CMD tag %#x: %s descriptors add up to %d bytes, TOTAL LENGTH is %d (%d of %d descriptors in the IU): %w",
			tag, dir, sum, total, n, tableN, ErrInconsistent)
	}
	return nil
}

// Fields returns the fixed part and, walked with immDataOffset as DataBuffers does, the data
// buffers; variable parts are copies. It is meant for tests, tracing and fuzzing, not for the
// data path (it allocates).
func (b Cmd) Fields(immDataOffset uint16) (CmdFields, error) {
	out, in, err := b.DataBuffers(immDataOffset)
	if err != nil {
		return CmdFields{}, err
	}
	f := CmdFields{
		SolNot:   b.SolNot(),
		Tag:      b.Tag(),
		LUN:      b.LUN(),
		TaskAttr: b.TaskAttr(),
		AddCDB:   cloneBytes(b[cmdAddData : cmdAddData+b.AddCDBLen()]),
		DataOut:  out.Fields(),
		DataIn:   in.Fields(),
	}
	copy(f.CDB[:], b[cmdCDB:cmdAddData])
	return f, nil
}
