//go:build linux && cgo

package verbs

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// connPhase is where a connection is in its life, under Conn.mu. It only moves forward, and
// only through setPhase, which checks the move against connMoves.
//
//	open ── Disconnect ──▶ disconnecting
//	  │ ╲                       │ ╲
//	  │  ╲ Close                │  ╲ Close
//	  │   ╲                     │   ╲
//	  │    ▶ closed ◀───────────┼────┘
//	  │ device removed          │ device removed
//	  ▼                         ▼
//	removed ◀───────────────────┘
//	  │ Close
//	  ▼
//	removed-closed
type connPhase uint8

const (
	// connOpen: the QP is usable (connected, or being connected).
	connOpen connPhase = iota
	// connDisconnecting: Disconnect moved the QP to the error state and sent the DREQ (or
	// answered the peer's): what is posted completes flushed, EventDisconnected follows.
	connDisconnecting
	// connRemoved: the device went away; QP, CQs, completion channel and CM id are released
	// (no flush completions), Close is still to come.
	connRemoved
	// connClosed: Close released everything (after a DREQ if the QP was open).
	connClosed
	// connRemovedClosed: Close came after the device's removal had released everything.
	connRemovedClosed
)

var connPhaseNames = [...]string{"open", "disconnecting", "removed", "closed", "removed-closed"}

func (p connPhase) String() string {
	if int(p) < len(connPhaseNames) {
		return connPhaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// connMoves lists the phases each phase may move to (bit i: phase i).
var connMoves = [...]uint8{
	connOpen:          1<<connDisconnecting | 1<<connRemoved | 1<<connClosed,
	connDisconnecting: 1<<connRemoved | 1<<connClosed,
	connRemoved:       1 << connRemovedClosed,
	connClosed:        0,
	connRemovedClosed: 0,
}

// released reports whether the QP and everything with it are gone.
func (p connPhase) released() bool { return p >= connRemoved }

// closed reports whether Close was called.
func (p connPhase) closed() bool { return p == connClosed || p == connRemovedClosed }

// removed reports whether the device's removal released the connection.
func (p connPhase) removed() bool { return p == connRemoved || p == connRemovedClosed }

// setPhase moves the connection to p, under c.mu. A move the table does not allow is a bug of
// this package: it panics.
func (c *Conn) setPhase(p connPhase) {
	if connMoves[c.phase]&(1<<p) == 0 {
		panic(fmt.Sprintf("verbs: %v: illegal phase move %v -> %v", c, c.phase, p))
	}
	c.phase = p
}

// eventPhase is the last connection event queued for PollEvent, under Conn.evMu: each is
// queued at most once, in this order, and none after EventDeviceRemoved (eventMoves).
type eventPhase uint8

const (
	evNone eventPhase = iota
	evEstablished
	evDisconnected
	evRemoved
)

// eventMoves lists the events that may follow each (bit i: eventPhase i); evEstablished does
// not follow evDisconnected (a connection that failed before it was established).
var eventMoves = [...]uint8{
	evNone:         1<<evEstablished | 1<<evDisconnected | 1<<evRemoved,
	evEstablished:  1<<evDisconnected | 1<<evRemoved,
	evDisconnected: 1 << evRemoved,
	evRemoved:      0,
}

var eventOf = [...]ib.Event{evEstablished: ib.EventEstablished, evDisconnected: ib.EventDisconnected, evRemoved: ib.EventDeviceRemoved}

// queueEvent queues e unless eventMoves says it cannot follow what was queued.
func (c *Conn) queueEvent(e eventPhase) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	c.queueEventLocked(e)
}

func (c *Conn) queueEventLocked(e eventPhase) {
	if eventMoves[c.queued]&(1<<e) == 0 {
		return
	}
	c.queued = e
	c.pushLocked(eventOf[e])
}
