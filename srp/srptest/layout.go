package srptest

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// Layout selects how a Request's data buffers are described in the SRP_CMD. A nil Layout does
// what ib_srp does with fast registration: a write goes as immediate data when the target
// granted it and 68 + length fits the IT IU length, anything else as one direct descriptor.
type Layout interface{ layout() }

// Direct describes each data buffer with one direct descriptor over one registered region.
// ib_srp sends the descriptor with DATA-OUT / DATA-IN BUFFER DESCRIPTOR COUNT 0.
type Direct struct{}

// Indirect splits each data buffer into N registered regions of (almost) equal size — the
// first len%N get one byte more — and describes them with an indirect descriptor whose
// partial list holds min(N, CmdSGEntries) of them and whose table, registered for remote
// read, holds all N. With N > CmdSGEntries the command fails unless Config.AllowExtSG is
// set, as in ib_srp.
type Indirect struct{ N int }

// External is Indirect with N > CmdSGEntries, asserted: the descriptor table is larger than
// the partial list, so the target has to RDMA READ the rest of it (Config.AllowExtSG must be
// set). Building it with N <= CmdSGEntries is an error.
type External struct{ N int }

// Immediate carries the data-out buffer in the SRP_CMD itself (SRP-2). It fails unless the
// target granted immediate data and ImmDataOffset + length fits the IT IU length. A data-in
// buffer of the same request (bidirectional) gets a direct descriptor.
type Immediate struct{}

func (Direct) layout()    {}
func (Indirect) layout()  {}
func (External) layout()  {}
func (Immediate) layout() {}

// negotiated is what the SRP_CMD builder needs from the login.
type negotiated struct {
	immGranted bool
	immOffset  uint16
	// maxITIULen is ib_srp's ch->max_it_iu_len, recomputed after the login with the grant:
	// immediate data is used when immOffset + length <= maxITIULen.
	maxITIULen   uint32
	cmdSGEntries int
	allowExtSG   bool
}

// cmdBuild is an SRP_CMD ready to encode, with the regions registered for it.
type cmdBuild struct {
	fields iu.CmdFields
	// mrs are deregistered when the response arrives: data pieces, then descriptor tables.
	mrs []ib.MR
	// inBuf is the data-in buffer (nil without data-in).
	inBuf []byte
}

// release deregisters every region of the command. Errors are ignored: a region can only fail
// to deregister if it already was, or the device is gone.
func (b *cmdBuild) release() {
	for _, mr := range b.mrs {
		_ = mr.Deregister()
	}
	b.mrs = nil
}

// Data-in regions take RDMA WRITEs from the target, data-out regions and descriptor tables RDMA
// READs; nothing more, so that a target moving data the wrong way gets a remote access error.
const (
	accessDataIn  = ib.AccessLocalWrite | ib.AccessRemoteWrite
	accessDataOut = ib.AccessRemoteRead
	accessTable   = ib.AccessRemoteRead
)

// prepareCmd builds the SRP_CMD fields for req, registering its data buffers (and descriptor
// tables) in pd. On error nothing stays registered.
func prepareCmd(pd ib.ProtectionDomain, neg *negotiated, req *Request, tag iu.Tag) (*cmdBuild, error) {
	if req.DataInLen < 0 {
		return nil, fmt.Errorf("srptest: data-in length %d: %w", req.DataInLen, ErrConfig)
	}
	b := &cmdBuild{fields: iu.CmdFields{
		Tag:      tag,
		LUN:      req.lun(),
		TaskAttr: req.Attr,
	}}
	if len(req.CDB) > iu.CDBSize+iu.MaxAddCDBLen {
		return nil, fmt.Errorf("srptest: CDB of %d bytes: %w", len(req.CDB), ErrConfig)
	}
	copy(b.fields.CDB[:], req.CDB)
	if len(req.CDB) > iu.CDBSize {
		// ib_srp: add_cdb_len = round_up(cmd_len - 16, 4), the padding zeroed.
		add := len(req.CDB) - iu.CDBSize
		b.fields.AddCDB = make([]byte, (add+3)&^3)
		copy(b.fields.AddCDB, req.CDB[iu.CDBSize:])
	}
	ok := false
	defer func() {
		if !ok {
			b.release()
		}
	}()

	if len(req.DataOut) > 0 {
		if err := b.describe(pd, neg, req.Layout, req.DataOut, false, &b.fields.DataOut); err != nil {
			return nil, err
		}
	}
	if req.DataInLen > 0 {
		b.inBuf = make([]byte, req.DataInLen)
		layout := req.Layout
		if _, imm := layout.(Immediate); imm {
			layout = Direct{}
		}
		if err := b.describe(pd, neg, layout, b.inBuf, true, &b.fields.DataIn); err != nil {
			return nil, err
		}
	}
	ok = true
	return b, nil
}

// describe fills d for one data buffer according to layout.
func (b *cmdBuild) describe(pd ib.ProtectionDomain, neg *negotiated, layout Layout, buf []byte, in bool, d *iu.DataBufFields) error {
	dir := "data-out"
	access := accessDataOut
	if in {
		dir, access = "data-in", accessDataIn
	}
	n := 1
	switch l := layout.(type) {
	case nil:
		if !in && immFits(neg, len(buf)) {
			*d = iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: neg.immOffset, ImmData: buf}
			return nil
		}
	case Direct:
	case Immediate:
		if !neg.immGranted {
			return fmt.Errorf("srptest: immediate data-out: not granted at login: %w", ErrConfig)
		}
		if !immFits(neg, len(buf)) {
			return fmt.Errorf("srptest: immediate data-out of %d bytes at offset %d exceeds the IT IU length %d: %w",
				len(buf), neg.immOffset, neg.maxITIULen, ErrConfig)
		}
		*d = iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: neg.immOffset, ImmData: buf}
		return nil
	case Indirect:
		n = l.N
		if n < 1 {
			return fmt.Errorf("srptest: %s indirect layout with %d descriptors: %w", dir, n, ErrConfig)
		}
		if n > neg.cmdSGEntries && !neg.allowExtSG {
			return fmt.Errorf("srptest: %s: %d descriptors, cmd_sg_entries %d, allow_ext_sg off: %w",
				dir, n, neg.cmdSGEntries, ErrSGListTooLong)
		}
	case External:
		n = l.N
		if n <= neg.cmdSGEntries {
			return fmt.Errorf("srptest: %s external layout with %d descriptors fits the %d in the IU: %w",
				dir, n, neg.cmdSGEntries, ErrConfig)
		}
		if !neg.allowExtSG {
			return fmt.Errorf("srptest: %s: %d descriptors, allow_ext_sg off: %w", dir, n, ErrSGListTooLong)
		}
	default:
		return fmt.Errorf("srptest: layout %T: %w", layout, ErrConfig)
	}
	if n > len(buf) {
		return fmt.Errorf("srptest: %s of %d bytes cannot be split into %d regions: %w", dir, len(buf), n, ErrConfig)
	}
	_, indirect := layout.(Indirect)
	_, external := layout.(External)
	descs := make([]iu.DirectBufFields, n)
	off := 0
	for i := range descs {
		size := len(buf) / n
		if i < len(buf)%n {
			size++
		}
		mr, err := pd.RegisterMemory(buf[off:off+size], access)
		if err != nil {
			return fmt.Errorf("srptest: registering %s region %d of %d bytes: %w", dir, i, size, err)
		}
		b.mrs = append(b.mrs, mr)
		descs[i] = iu.DirectBufFields{VA: mr.Addr(), Key: mr.RKey(), Len: uint32(size)}
		off += size
	}
	if !indirect && !external {
		*d = iu.DataBufFields{Format: iu.DescDirect, Direct: descs[0]}
		return nil
	}
	// The whole table lives in initiator memory, registered for remote read as ib_srp's
	// srp_map_idb does; the IU carries the first min(n, cmd_sg_entries) entries.
	table := make([]byte, n*iu.DirectBufSize)
	for i := range descs {
		iu.DirectBuf(table[i*iu.DirectBufSize:]).Encode(&descs[i])
	}
	tmr, err := pd.RegisterMemory(table, accessTable)
	if err != nil {
		return fmt.Errorf("srptest: registering the %s descriptor table: %w", dir, err)
	}
	b.mrs = append(b.mrs, tmr)
	count := min(n, neg.cmdSGEntries)
	*d = iu.DataBufFields{
		Format:  iu.DescIndirect,
		DescCnt: uint8(count),
		Indirect: iu.IndirectBufFields{
			Table:    iu.DirectBufFields{VA: tmr.Addr(), Key: tmr.RKey(), Len: uint32(len(table))},
			TotalLen: uint32(len(buf)),
			Descs:    descs[:count],
		},
	}
	return nil
}

// immFits is ib_srp's test for sending a write as immediate data (the scatterlist-count part
// always holds: the buffer is one piece).
func immFits(neg *negotiated, n int) bool {
	return neg.immGranted && uint64(neg.immOffset)+uint64(n) <= uint64(neg.maxITIULen)
}
