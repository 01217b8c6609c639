package control

import (
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/internal/accept"
	"github.com/srptarget/srptarget/lib/loglimit"
)

// controlMaxConns bounds the connections served at once; a new one takes the place of the one
// idle longest (admit).
const controlMaxConns = 16

// controlConn is one admitted connection.
type controlConn struct {
	c      net.Conn
	peer   peer
	access controlAccess
	// busy and idleSince are guarded by connTable.mu: a connection is idle while it waits
	// for a request line.
	busy      bool
	idleSince time.Time
}

// connTable is the connections admitted: at most controlMaxConns, each busy answering a
// request or idle waiting for the next.
type connTable struct {
	log                 *zap.Logger
	refuseLog, evictLog *loglimit.Locked

	mu    sync.Mutex
	conns map[*controlConn]struct{}
}

func newConnTable(log *zap.Logger) *connTable {
	return &connTable{
		log:       log,
		refuseLog: loglimit.NewLocked(1, accept.LogEvery),
		evictLog:  loglimit.NewLocked(1, accept.LogEvery),
		conns:     make(map[*controlConn]struct{}),
	}
}

// admit finds room for a new connection: a free slot, or else the slot of the connection that
// has waited longest for a request, which is closed. So idle clients, even controlMaxConns of
// them, cannot keep another out, while requests in progress are never cut. It reports false
// when every connection is in the middle of a request.
func (t *connTable) admit(cc *controlConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.conns) >= controlMaxConns {
		var oldest *controlConn
		for o := range t.conns {
			if !o.busy && (oldest == nil || o.idleSince.Before(oldest.idleSince)) {
				oldest = o
			}
		}
		if oldest == nil {
			return false
		}
		delete(t.conns, oldest)
		_ = oldest.c.Close()
		if ok, left := t.evictLog.Allow(); ok {
			t.log.Info("control socket: every connection in use; closed the one idle longest to admit a new one",
				append(oldest.peer.fields(), zap.Duration("idle", time.Since(oldest.idleSince).Round(time.Millisecond)),
					zap.Int("more_since_last_logged", left))...)
		}
	}
	cc.idleSince = time.Now()
	t.conns[cc] = struct{}{}
	return true
}

// refuse answers a connection that is not admitted with why, closes it and logs it, at most
// once per accept.LogEvery.
func (t *connTable) refuse(c net.Conn, p peer, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_ = writeResponse(c, Response{Version: Version, Error: why})
	_ = c.Close()
	if ok, left := t.refuseLog.Allow(); ok {
		t.log.Warn("control socket: connection refused", append(p.fields(), zap.String("reason", why),
			zap.Int("more_since_last_logged", left))...)
	}
}

// setBusy marks cc as answering a request (busy) or waiting for the next one.
func (t *connTable) setBusy(cc *controlConn, busy bool) {
	t.mu.Lock()
	cc.busy = busy
	if !busy {
		cc.idleSince = time.Now()
	}
	t.mu.Unlock()
}

// remove forgets cc, which its goroutine has finished with.
func (t *connTable) remove(cc *controlConn) {
	t.mu.Lock()
	delete(t.conns, cc)
	t.mu.Unlock()
}

// closeAll closes the idle connections and, with busyToo, those answering a request too.
func (t *connTable) closeAll(busyToo bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for cc := range t.conns {
		if busyToo || !cc.busy {
			_ = cc.c.Close()
		}
	}
}
