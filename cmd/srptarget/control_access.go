package main

// Who may use the control socket and for what, and how its connections are admitted so that
// neither strangers nor idle clients keep the operator out.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// peer is the process at the other end of a control connection, with the credentials the
// kernel recorded when it connected (SO_PEERCRED and SO_PEERGROUPS, socket(7), unix(7)): a
// client cannot claim others.
type peer struct {
	pid      int32
	uid, gid uint32
	groups   []uint32 // supplementary groups
}

func (p peer) inGroup(gid int) bool {
	return gid >= 0 && (p.gid == uint32(gid) || slices.Contains(p.groups, uint32(gid)))
}

// fields are the peer's log fields.
func (p peer) fields() []zap.Field {
	return []zap.Field{zap.Uint32("uid", p.uid), zap.Uint32("gid", p.gid), zap.Int32("pid", p.pid)}
}

// peerOf reads the credentials of the peer of a Unix stream connection.
func peerOf(c net.Conn) (peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}, fmt.Errorf("%T is not a Unix socket connection", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var p peer
	var serr error
	if err := raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		if cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); serr != nil {
			serr = fmt.Errorf("SO_PEERCRED: %w", serr)
			return
		}
		p = peer{pid: cred.Pid, uid: cred.Uid, gid: cred.Gid}
		p.groups, serr = peerGroups(int(fd), cred.Uid)
	}); err != nil {
		return peer{}, err
	}
	return p, serr
}

// controlAccess is what a client may ask.
type controlAccess int

const (
	accessNone controlAccess = iota
	// accessRead: status, sessions, luns, stats and acl-check.
	accessRead
	// accessAll: reload as well, dry runs (validate --diff) included.
	accessAll
)

// controlPolicy decides what each client may ask. Root and the daemon's own user may ask
// anything; so may the members of group (--control-group, by default the daemon's own
// group, the socket's group); the members of readGroup (--control-read-group) may only read.
type controlPolicy struct {
	euid                     uint32
	group, readGroup         int // gids; -1 for none
	groupName, readGroupName string
}

// newControlPolicy resolves the groups of --control-group and --control-read-group.
func newControlPolicy(group, readGroup string) (controlPolicy, error) {
	p := controlPolicy{euid: uint32(os.Geteuid()), group: os.Getegid(), readGroup: -1,
		groupName: "gid " + strconv.Itoa(os.Getegid()) + " (the daemon's group)"}
	if group != "" {
		gid, err := lookupGroup(group)
		if err != nil {
			return p, err
		}
		p.group, p.groupName = gid, group
	}
	if readGroup != "" {
		gid, err := lookupGroup(readGroup)
		if err != nil {
			return p, err
		}
		p.readGroup, p.readGroupName = gid, readGroup
	}
	return p, nil
}

func (p *controlPolicy) access(c peer) controlAccess {
	switch {
	case c.uid == 0 || c.uid == p.euid || c.inGroup(p.group):
		return accessAll
	case c.inGroup(p.readGroup):
		return accessRead
	}
	return accessNone
}

// trusted tells the clients for whom the daemon may open what a configuration they send
// names (a dry run's checks): root, and the daemon's own user, who could open it anyway.
func (p *controlPolicy) trusted(c peer) bool { return c.uid == 0 || c.uid == p.euid }

// refusal says why a client may not connect, or may not ask command.
func (p *controlPolicy) refusal(c peer, command string) string {
	who := fmt.Sprintf("uid %d", c.uid)
	if command == "" {
		return fmt.Sprintf("permission denied: %s is neither root, the daemon's user nor a member of %s (--control-group)%s",
			who, p.groupName, p.readNote())
	}
	return fmt.Sprintf("permission denied: %s may only read (status, sessions, luns, stats, acl-check: group %s); %s needs root, the daemon's user or a member of %s (--control-group)",
		who, p.readGroupName, command, p.groupName)
}

func (p *controlPolicy) readNote() string {
	if p.readGroup < 0 {
		return ""
	}
	return " or " + p.readGroupName + " (--control-read-group)"
}

// needs is the access a request needs: reload and a change of the log level change the
// daemon; the rest only read.
func needs(req controlRequest) controlAccess {
	if req.Command == "reload" || req.Command == "log-level" && req.Level != "" {
		return accessAll
	}
	return accessRead
}

// controlConn is one admitted connection.
type controlConn struct {
	c      net.Conn
	peer   peer
	access controlAccess
	// busy and idleSince are guarded by controlServer.mu: a connection is idle while it
	// waits for a request line.
	busy      bool
	idleSince time.Time
}

// admit finds room for a new connection: a free slot, or else the slot of the connection that
// has waited longest for a request, which is closed. So idle clients, even controlMaxConns of
// them, cannot keep another out, while requests in progress are never cut. It reports false
// when every connection is in the middle of a request.
func (s *controlServer) admit(cc *controlConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= controlMaxConns {
		var oldest *controlConn
		for o := range s.conns {
			if !o.busy && (oldest == nil || o.idleSince.Before(oldest.idleSince)) {
				oldest = o
			}
		}
		if oldest == nil {
			return false
		}
		delete(s.conns, oldest)
		_ = oldest.c.Close()
		if ok, left := s.evictLog.Allow(); ok {
			s.log.Info("control socket: every connection in use; closed the one idle longest to admit a new one",
				append(oldest.peer.fields(), zap.Duration("idle", time.Since(oldest.idleSince).Round(time.Millisecond)),
					zap.Int("more_since_last_logged", left))...)
		}
	}
	cc.idleSince = time.Now()
	s.conns[cc] = struct{}{}
	return true
}

// setBusy marks cc as answering a request (busy) or waiting for the next one.
func (s *controlServer) setBusy(cc *controlConn, busy bool) {
	s.mu.Lock()
	cc.busy = busy
	if !busy {
		cc.idleSince = time.Now()
	}
	s.mu.Unlock()
}

// refuse answers a connection that is not admitted with why, closes it and logs it, at most
// once per logEvery.
func (s *controlServer) refuse(c net.Conn, p peer, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_ = writeResponse(c, controlResponse{Version: controlVersion, Error: why})
	_ = c.Close()
	if ok, left := s.refuseLog.Allow(); ok {
		s.log.Warn("control socket: connection refused", append(p.fields(), zap.String("reason", why),
			zap.Int("more_since_last_logged", left))...)
	}
}

// errControlClosing answers a request still running when the control socket closes.
var errControlClosing = errors.New("the daemon is shutting down")
