package ib

// Region is what a memory region reports alike on every fabric: the memory, the address the
// peer names it by, the two keys and the access. It implements those methods of MR; a fabric's
// MR type embeds it and adds Deregister.
type Region struct {
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	access     Access
}

// NewRegion describes buf, registered at addr with the keys lkey and rkey and access.
func NewRegion(buf []byte, addr uint64, lkey, rkey uint32, access Access) Region {
	return Region{buf: buf, addr: addr, lkey: lkey, rkey: rkey, access: access}
}

// Bytes implements MR.
func (r *Region) Bytes() []byte { return r.buf }

// Addr implements MR.
func (r *Region) Addr() uint64 { return r.addr }

// Len implements MR.
func (r *Region) Len() int { return len(r.buf) }

// LKey implements MR.
func (r *Region) LKey() uint32 { return r.lkey }

// RKey implements MR.
func (r *Region) RKey() uint32 { return r.rkey }

// Access implements MR.
func (r *Region) Access() Access { return r.access }
