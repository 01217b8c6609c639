//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import "syscall"

// A connection's end: Disconnect (the DREQ; what is posted flushes), Close, and the teardown
// both Close and the device's removal come to, which releases what the connection holds once.

// Disconnect implements ib.Conn: the QP goes to the error state (flushing everything
// outstanding) and rdma_disconnect sends a DREQ, or the DREP to the peer's DREQ.
// EventDisconnected follows from the CM; if the connection was never established, the CM has
// nothing to report and the event is queued here.
func (c *Conn) Disconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("disconnect"); err != nil {
		return err
	}
	if e := C.srpt_qp_err(c.qp); e != 0 {
		return errorf("disconnect %v: QP to ERR: %w", c, syscall.Errno(e))
	}
	if c.phase == connDisconnecting {
		return nil
	}
	c.setPhase(connDisconnecting)
	r := C.rdma_disconnect(c.id)
	c.evMu.Lock()
	est := c.queued != evNone
	c.evMu.Unlock()
	if r != 0 || !est {
		c.disconnectedEvent()
	}
	return nil
}

// Close implements ib.Conn: a connected QP is disconnected first (the peer gets a DREQ), then
// QP, CM id, CQ and completion channel are destroyed, in that order, after the goroutine
// waiting on the channel has stopped.
func (c *Conn) Close() error {
	if c.teardown(false) {
		c.signal()
	}
	return nil
}

// teardown releases everything the connection holds, once, because of Close or (removed) of
// the device's removal, in which case no DREQ is sent. It reports whether the phase moved.
func (c *Conn) teardown(removed bool) bool {
	c.mu.Lock()
	switch {
	case c.phase == connRemoved && !removed:
		c.setPhase(connRemovedClosed) // closed after the removal released everything
		c.mu.Unlock()
		return true
	case c.phase.released():
		c.mu.Unlock()
		return false
	case removed:
		c.setPhase(connRemoved)
	default:
		if c.qp != nil && c.ownsID && c.phase == connOpen {
			C.srpt_qp_err(c.qp)
			C.rdma_disconnect(c.id)
		}
		c.setPhase(connClosed)
	}
	c.fileToServe = c.serving
	c.mu.Unlock()
	// From here on nothing else touches the resources: the data path sees released, the CM
	// events find no handler, COMM_EST finds no QP.
	c.loop.unregisterIf(c.key, c)
	c.dev.leave(c)
	switch {
	case c.fileToServe:
		// Serve reads the channel under mu and sees released; the interrupt ends its park.
		c.Interrupt()
	case c.cqFile != nil:
		// Close returns once no read of the file is in progress (internal/poll's FD.Close
		// waits for its references to go).
		c.cqFile.Close()
		if c.readyMode.Load() {
			<-c.waitDone
		}
	}
	if c.qp != nil {
		c.dev.delQP(c.qpn)
		C.ibv_destroy_qp(c.qp)
	}
	c.leaveShared()
	if c.ownsID {
		C.rdma_destroy_id(c.id)
	}
	// The QP is gone first: a CQ in use by a QP cannot be destroyed.
	c.scq.destroy()
	c.rcq.destroy()
	if c.ch != nil {
		C.ibv_destroy_comp_channel(c.ch)
	}
	c.bufs.free()
	c.dev.release()
	c.loop.release()
	c.signal()
	return true
}
