package control

// Who may use the control socket and for what, and how its connections are admitted so that
// neither strangers nor idle clients keep the operator out.

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"

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

// Policy decides what each client may ask. Root and the daemon's own user may ask
// anything; so may the members of group (--control-group, by default the daemon's own
// group, the socket's group); the members of readGroup (--control-read-group) may only read.
type Policy struct {
	euid                     uint32
	group, readGroup         int // gids; -1 for none
	groupName, readGroupName string
}

// NewPolicy resolves the groups of --control-group and --control-read-group.
func NewPolicy(group, readGroup string) (Policy, error) {
	p := Policy{euid: uint32(os.Geteuid()), group: os.Getegid(), readGroup: -1,
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

func (p *Policy) access(c peer) controlAccess {
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
func (p *Policy) trusted(c peer) bool { return c.uid == 0 || c.uid == p.euid }

// refusal says why a client may not connect, or may not ask command.
func (p *Policy) refusal(c peer, command string) string {
	who := fmt.Sprintf("uid %d", c.uid)
	if command == "" {
		return fmt.Sprintf("permission denied: %s is neither root, the daemon's user nor a member of %s (--control-group)%s",
			who, p.groupName, p.readNote())
	}
	return fmt.Sprintf("permission denied: %s may only read (status, sessions, luns, stats, acl-check: group %s); %s needs root, the daemon's user or a member of %s (--control-group)",
		who, p.readGroupName, command, p.groupName)
}

func (p *Policy) readNote() string {
	if p.readGroup < 0 {
		return ""
	}
	return " or " + p.readGroupName + " (--control-read-group)"
}

// needs is the access a request needs: reload and a change of the log level change the
// daemon; the rest only read.
func needs(req Request) controlAccess {
	if req.Command == "reload" || req.Command == "log-level" && req.Level != "" {
		return accessAll
	}
	return accessRead
}
