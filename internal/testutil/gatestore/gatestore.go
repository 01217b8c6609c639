// Package gatestore is a backstore for tests that keeps commands inside a logical unit: its reads
// and writes wait at gates the test opens when it is ready. It is a package of its own, apart
// from testutil, so that testutil depends on nothing of this module. Only tests import it.
package gatestore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/srptarget/srptarget/backstore"
)

// Store wraps a backstore. Reads and writes wait at two kinds of gates: one for all of them
// (Hold, Release), and one per byte offset (Gate). A test holds a gate, sends commands, waits
// until they have reached it (Entered, RequireEntered), acts (an abort, a second command, a
// logout) and opens the gate. Store also records the order in which reads and writes went
// through (TakeOrder).
type Store struct {
	backstore.Backstore
	// Entered counts the reads and writes that reached the store since the last Hold, held
	// or not.
	Entered atomic.Int32

	arrived chan int64 // offsets of the I/O stopped at a gate of Gate

	mu    sync.Mutex
	all   chan struct{} // closed while not held
	gates map[int64]chan struct{}
	order []string
}

// New wraps inner with every gate open.
func New(inner backstore.Backstore) *Store {
	g := &Store{Backstore: inner, arrived: make(chan int64, 64), all: make(chan struct{}),
		gates: make(map[int64]chan struct{})}
	close(g.all)
	return g
}

// Hold makes later reads and writes wait until Release, and restarts the Entered count.
// Holding a store already held keeps the same gate: operations waiting at it must not be left
// behind at a gate nobody releases.
func (g *Store) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Entered.Store(0)
	select {
	case <-g.all:
		g.all = make(chan struct{})
	default:
	}
}

// Release lets the waiting and later reads and writes through.
func (g *Store) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.all:
	default:
		close(g.all)
	}
}

// Gate makes the reads and writes at byte offset off wait until the returned function is
// called; each announces itself to RequireEntered first.
func (g *Store) Gate(off int64) (open func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gates[off] = ch
	g.mu.Unlock()
	return sync.OnceFunc(func() { close(ch) })
}

// RequireEntered waits for a read or write to reach the gate of Gate at off, and fails the
// test if one reaches another such gate first or none comes within 10 seconds.
func (g *Store) RequireEntered(t testing.TB, off int64) {
	t.Helper()
	select {
	case got := <-g.arrived:
		if got != off {
			t.Fatalf("I/O reached the gate at %d, not the one at %d", got, off)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no I/O reached the gate at %d", off)
	}
}

// TakeOrder returns the reads and writes that went through so far, as "read OFFSET" and
// "write OFFSET" in the order they passed their gates, and forgets them.
func (g *Store) TakeOrder() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.order
	g.order = nil
	return o
}

func (g *Store) pass(op string, off int64) {
	g.Entered.Add(1)
	g.mu.Lock()
	all, ch := g.all, g.gates[off]
	g.mu.Unlock()
	if ch != nil {
		g.arrived <- off
		<-ch
	}
	<-all
	g.mu.Lock()
	g.order = append(g.order, fmt.Sprintf("%s %d", op, off))
	g.mu.Unlock()
}

// ReadAt reads once the gates let it through.
func (g *Store) ReadAt(p []byte, off int64) error {
	g.pass("read", off)
	return g.Backstore.ReadAt(p, off)
}

// WriteAt writes once the gates let it through.
func (g *Store) WriteAt(p []byte, off int64, fua bool) error {
	g.pass("write", off)
	return g.Backstore.WriteAt(p, off, fua)
}
