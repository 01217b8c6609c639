//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import "github.com/srptarget/srptarget/ib"

// A connection's events: the RDMA/CM events the loop hands it, the device's removal, and the
// queue PollEvent reads (in the order eventMoves allows, lifecycle.go).

// PollEvent implements ib.Conn.
func (c *Conn) PollEvent() (ib.Event, bool) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if c.evHead == c.evTail {
		return 0, false
	}
	e := c.events[c.evHead%len(c.events)]
	c.evHead++
	return e, true
}

// pushLocked queues an event, under evMu. At most three events ever occur (established,
// disconnected, device removed), so the ring never fills.
func (c *Conn) pushLocked(e ib.Event) {
	c.events[c.evTail%len(c.events)] = e
	c.evTail++
	c.signal()
	if c.onEvent != nil {
		c.onEvent()
	}
}

func (c *Conn) establishedEvent() { c.queueEvent(evEstablished) }

func (c *Conn) disconnectedEvent() { c.queueEvent(evDisconnected) }

// cmEvent receives the connection's RDMA/CM events from the loop.
func (c *Conn) cmEvent(ev *cmEvent) {
	c.evMu.Lock()
	if c.connEv != nil {
		select {
		case c.connEv <- *ev:
		default:
		}
		c.evMu.Unlock()
		return
	}
	c.evMu.Unlock()
	switch ev.typ {
	case C.RDMA_CM_EVENT_ESTABLISHED:
		c.establishedEvent()
	case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_REJECTED, C.RDMA_CM_EVENT_CONNECT_ERROR,
		C.RDMA_CM_EVENT_UNREACHABLE:
		// After the peer's DREQ, after our own DREQ's answer (or its timeout), or when the
		// connection failed before it was established.
		c.disconnectedEvent()
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		c.dev.remove()
	}
}

// commEstablished passes IBV_EVENT_COMM_EST to the CM: the initiator's first packet arrived
// before the RTU, and the CM must treat the connection as established.
func (c *Conn) commEstablished() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.phase.released() && c.ownsID {
		C.rdma_notify(c.id, C.IBV_EVENT_COMM_EST)
	}
}

// deviceRemoved queues EventDeviceRemoved and releases the connection's verbs and CM
// resources at once; Close then has nothing left to do but mark it closed. A Route.Connect
// still waiting for the answer is told too: the removal may have been reported on another id
// of the device, and this one's events end with its destruction.
func (c *Conn) deviceRemoved() {
	c.evMu.Lock()
	if c.connEv != nil {
		select {
		case c.connEv <- cmEvent{typ: C.RDMA_CM_EVENT_DEVICE_REMOVAL}:
		default:
		}
	}
	c.queueEventLocked(evRemoved)
	c.evMu.Unlock()
	c.teardown(true)
}
