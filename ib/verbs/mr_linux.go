//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// pdHandle is the ib.ProtectionDomain of a devCtx.
type pdHandle struct{ d *devCtx }

var (
	_ ib.ProtectionDomain = pdHandle{}
	_ ib.RemovalNotifier  = pdHandle{}
)

// Removed is closed when the device is gone: its regions are deregistered already, and the
// protection domain takes no new one. An engine that keeps memory registered while no
// connection is open (a buffer pool per device) learns from it that it can unmap the memory:
// its connections may all have ended before the removal (the initiator disconnected first),
// so none reported EventDeviceRemoved. A device added back is a new protection domain.
func (p pdHandle) Removed() <-chan struct{} { return p.d.gone }

// RegisterMemory implements ib.ProtectionDomain with ibv_reg_mr. buf must not be Go heap
// memory: the HCA keeps using it after the call, which Go forbids (use an ib.Slab). The region
// holds a reference on the device until Deregister.
func (p pdHandle) RegisterMemory(buf []byte, access ib.Access) (ib.MR, error) {
	d := p.d
	if len(buf) == 0 || uint64(len(buf)) >= 1<<40 {
		return nil, errorf("register %d bytes on %s: %w", len(buf), d, ib.ErrInvalidArgument)
	}
	if err := ib.CheckAccess(access); err != nil {
		return nil, errorf("register on %s: %w", d, err)
	}
	if err := d.acquire(); err != nil {
		return nil, errorf("register: %w", err)
	}
	var flags C.int
	if access&ib.AccessLocalWrite != 0 {
		flags |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if access&ib.AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if access&ib.AccessRemoteRead != 0 {
		flags |= C.IBV_ACCESS_REMOTE_READ
	}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	vm, err := C.srpt_reg_mr(d.pd, base, C.size_t(len(buf)), flags)
	if vm == nil {
		d.release()
		return nil, errorf("register %d bytes on %s: ibv_reg_mr: %w", len(buf), d, errnoOr(err, errnoEINVAL))
	}
	m := &mr{
		Region: ib.NewRegion(buf, uint64(uintptr(base)), uint32(vm.lkey), uint32(vm.rkey), access),
		dev:    d,
		mr:     vm,
	}
	d.mu.Lock()
	if d.removed {
		// The removal swept the regions before this one was in the set.
		d.mu.Unlock()
		C.ibv_dereg_mr(vm)
		d.release()
		return nil, errorf("register %d bytes on %s: %w", len(buf), d, ib.ErrDeviceRemoved)
	}
	d.mrs[m] = struct{}{}
	d.mu.Unlock()
	return m, nil
}

// mr is an ib.MR registered with ibv_reg_mr. Its fields are immutable; dead is set once by
// Deregister, gone (under mu) when the device's removal deregistered it.
type mr struct {
	ib.Region
	dev *devCtx
	mr  *C.struct_ibv_mr

	mu   sync.Mutex
	dead atomic.Bool
	gone bool
}

var _ ib.MR = (*mr)(nil)

func (m *mr) String() string {
	return fmt.Sprintf("mr(%s addr=%#x len=%d lkey=%#x rkey=%#x)", m.dev, m.Addr(), m.Len(), m.LKey(), m.RKey())
}

// Deregister implements ib.MR with ibv_dereg_mr and releases the region's reference on the
// device. After the device's removal it still succeeds: the removal deregistered the region
// already, or the context is being torn down.
func (m *mr) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() {
		return errorf("deregister %v: %w", m, ib.ErrClosed)
	}
	if m.gone {
		m.dead.Store(true)
		return nil
	}
	if e := C.ibv_dereg_mr(m.mr); e != 0 && !m.dev.isRemoved() {
		return errorf("deregister %v: %w", m, syscall.Errno(e))
	}
	m.dead.Store(true)
	m.dev.mu.Lock()
	delete(m.dev.mrs, m)
	m.dev.mu.Unlock()
	m.dev.release()
	return nil
}

// deviceRemoved deregisters the region for the device's removal unless Deregister did; true
// means the caller releases the region's reference.
func (m *mr) deviceRemoved() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() || m.gone {
		return false
	}
	C.ibv_dereg_mr(m.mr) // an error changes nothing: the device is gone either way
	m.gone = true
	return true
}
