package memfabric

import (
	"fmt"
	"sync"

	"github.com/srptarget/srptarget/ib"
)

// addrBase is where region addresses start. Each region gets its own 4 GiB window
// (addrBase + seq<<32), so an address computed from the wrong region never falls inside the
// right one, and no address coincides with a real pointer.
const addrBase = 1 << 52

// pd is the protection domain of one node: every region registered on that node.
type pd struct {
	node *Node

	mu      sync.RWMutex
	byRKey  map[uint32]*mr
	removed bool
}

// mr is a registered region. Its fields are immutable after registration except valid, which is
// guarded by pd.mu.
type mr struct {
	ib.Region
	pd    *pd
	valid bool
}

var _ ib.ProtectionDomain = (*pd)(nil)

// RegisterMemory registers buf. The fabric accepts any memory, Go heap included; the verbs
// implementation does not (see ib.ProtectionDomain).
func (p *pd) RegisterMemory(buf []byte, access ib.Access) (ib.MR, error) {
	if len(buf) == 0 || uint64(len(buf)) >= 1<<32 {
		return nil, fmt.Errorf("memfabric: register %d bytes: %w", len(buf), ib.ErrInvalidArgument)
	}
	if err := ib.CheckAccess(access); err != nil {
		return nil, fmt.Errorf("memfabric: register: %w", err)
	}
	f := p.node.f
	seq := f.mrSeq.Add(1)
	key := f.keySeq.Add(1)
	m := &mr{
		Region: ib.NewRegion(buf, addrBase+seq<<32, key<<8|0x4c, key<<8|0x52, access),
		pd:     p,
		valid:  true,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed {
		return nil, fmt.Errorf("memfabric: register on %v: %w", p.node.addr, ib.ErrDeviceRemoved)
	}
	p.byRKey[m.RKey()] = m
	return m, nil
}

func (m *mr) String() string {
	return fmt.Sprintf("mr(addr=%#x len=%d lkey=%#x rkey=%#x)", m.Addr(), m.Len(), m.LKey(), m.RKey())
}
func (m *mr) Deregister() error {
	m.pd.mu.Lock()
	defer m.pd.mu.Unlock()
	if !m.valid {
		return fmt.Errorf("memfabric: deregister %v: %w", m, ib.ErrClosed)
	}
	m.valid = false
	delete(m.pd.byRKey, m.RKey())
	return nil
}

// local resolves a local SGE the way an HCA checks an lkey: the region must be registered in this
// protection domain, the range inside it, and local write allowed when the HCA writes (receive
// buffers, RDMA READ sinks).
func (p *pd) local(g ib.SGE, write bool) ([]byte, bool) {
	m, ok := g.MR.(*mr)
	if !ok || m.pd != p {
		return nil, false
	}
	p.mu.RLock()
	valid := m.valid
	p.mu.RUnlock()
	if !valid || (write && m.Access()&ib.AccessLocalWrite == 0) {
		return nil, false
	}
	size := uint64(m.Len())
	if g.Offset > size || uint64(g.Length) > size-g.Offset {
		return nil, false
	}
	return m.Bytes()[g.Offset : g.Offset+uint64(g.Length)], true
}

// remote resolves the responder side of an RDMA operation: rkey, bounds and access flag.
func (p *pd) remote(rkey uint32, addr uint64, length uint32, need ib.Access) ([]byte, bool) {
	p.mu.RLock()
	m := p.byRKey[rkey]
	p.mu.RUnlock()
	if m == nil || m.Access()&need == 0 || addr < m.Addr() {
		return nil, false
	}
	off := addr - m.Addr()
	size := uint64(m.Len())
	if off > size || uint64(length) > size-off {
		return nil, false
	}
	return m.Bytes()[off : off+uint64(length)], true
}
