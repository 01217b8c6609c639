//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// Posting to a shared receive queue, and finding it again from the QP number a completion
// carries.

var (
	srqMu  sync.Mutex
	srqs   = map[uint64]*sharedRQ{}
	srqSeq atomic.Uint64
)

func registerSRQ(s *sharedRQ) uint64 {
	id := srqSeq.Add(1)
	srqMu.Lock()
	srqs[id] = s
	srqMu.Unlock()
	return id
}

// srqCache is the SRQ a CQ's last SRQ completion named, valid while srqGen is gen.
type srqCache struct {
	id, gen uint64
	s       *sharedRQ
}

// srqGen moves when an SRQ is released (under srqMu).
var srqGen atomic.Uint64

// PostRecv implements ib.SRQ: the work requests are written into the SRQ's C array and posted
// as one chain with one ibv_post_srq_recv.
func (s *sharedRQ) PostRecv(wrs []ib.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, errorf("post receive on SRQ: %w", ib.ErrClosed)
	case s.removed:
		return 0, errorf("post receive on SRQ: %w", ib.ErrDeviceRemoved)
	}
	posted := 0
	for posted < len(wrs) {
		k := 0
		var verr error
		for posted+k < len(wrs) && k < len(s.bufs.rwr) {
			wr := &wrs[posted+k]
			if verr = ib.CheckRecvWR(wr, s.maxSGE); verr != nil {
				break
			}
			if len(s.free) == 0 {
				verr = fmt.Errorf("%d outstanding: %w", len(s.ids), ib.ErrQueueFull)
				break
			}
			slot := s.free[len(s.free)-1]
			if verr = s.bufs.fillRecv(k, wr, s.id<<srqShift|uint64(slot)<<2|srqTag, s.dev); verr != nil {
				break
			}
			s.free = s.free[:len(s.free)-1]
			s.ids[slot], s.used[slot] = wr.ID, true
			k++
		}
		if k > 0 {
			if e := C.srpt_post_srq_recv(s.srq, &s.bufs.rwr[0], C.int(k), s.bufs.bad); e != 0 {
				bad := int(*s.bufs.bad)
				for j := bad; j < k; j++ {
					slot := uint32(uint64(s.bufs.rwr[j].wr_id) >> 2 & (1<<(srqShift-2) - 1))
					s.used[slot] = false
					s.free = append(s.free, slot)
				}
				i := posted + bad
				return i, errorf("post receive on SRQ: work request %d (id %#x): ibv_post_srq_recv: %w",
					i, wrs[i].ID, postError(syscall.Errno(e)))
			}
			posted += k
		}
		if verr != nil {
			return posted, errorf("post receive on SRQ: work request %d (id %#x): %w", posted, wrs[posted].ID, verr)
		}
	}
	return posted, nil
}

// complete frees the slot of a receive whose completion was polled.
func (s *sharedRQ) complete(wrID uint64, status, opcode, byteLen uint32) (ib.Completion, error) {
	slot := wrID >> 2 & (1<<(srqShift-2) - 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot >= uint64(len(s.used)) || !s.used[slot] {
		return ib.Completion{}, fmt.Errorf("SRQ completion with wr_id %#x for a slot not posted: %w", wrID, ib.ErrInvalidArgument)
	}
	s.used[slot] = false
	s.free = append(s.free, uint32(slot))
	c := ib.Completion{ID: s.ids[slot], Status: ib.Status(status)}
	if c.Status == ib.StatusSuccess && opcode == wcRecv {
		c.Opcode, c.ByteLen = ib.OpRecv, byteLen
	}
	return c, nil
}
