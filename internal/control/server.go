package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/internal/accept"
)

const (
	controlSocketMode = 0o660
	controlDirMode    = 0o750
	// With --control-read-group the socket and the directory the daemon makes for it are open
	// to every local user: two groups cannot own one file, so the daemon decides alone, by
	// each client's credentials, as the D-Bus system bus does with its socket.
	controlSocketOpenMode = 0o666
	controlDirOpenMode    = 0o755
	// controlIdle closes a connection that sends no request for this long.
	controlIdle = time.Minute
	// controlCloseGrace is how long closing the socket waits for the answers in progress.
	controlCloseGrace = 2 * time.Second
)

// Backend is the daemon as the server sees it: it answers each command, while the server
// reads the requests, decides who may ask what and writes the answers. The daemon answers
// while it waits for an RDMA device too, with what it knows then.
type Backend interface {
	Status() StatusInfo
	Sessions() []SessionInfo
	LUNs() ([]LUNInfo, error)
	Stats() []StatEntry
	ACLCheck(initiator, source string) (*ACLCheckResult, error)
	// Reload applies the configuration file again, or plans it (DryRun). The result says
	// whether it was applied, errors included; an error is a request that could not be
	// answered at all (ErrClosing).
	Reload(r ReloadRequest) (*ReloadResult, error)
	// LogLevel says the level the daemon logs at or, with level set, changes it; log is the
	// server's, with the client's credentials, for the line that says who changed it.
	LogLevel(level string, log *zap.Logger) (*LogLevelResult, error)
}

// ReloadRequest is a reload (or its dry run) as a client asked for it.
type ReloadRequest struct {
	DryRun bool
	// Config is a configuration the client sent to plan (validate --diff), named ConfigName;
	// nil for the daemon's own file.
	Config     []byte
	ConfigName string
	// Trusted: the client is root or the daemon's user, for whom the daemon may open what
	// Config names (Policy.trusted).
	Trusted bool
	// Closing is closed when the control socket closes: a reload still waiting for
	// something slow (a dry run's backstore checks) gives up (ErrClosing).
	Closing <-chan struct{}
	// Log is the server's logger.
	Log *zap.Logger
}

// ErrClosing answers a request still running when the control socket closes.
var ErrClosing = errors.New("the daemon is shutting down")

// Server serves the control socket of one daemon.
type Server struct {
	backend Backend
	log     *zap.Logger
	path    string
	ln      *accept.Listener
	policy  Policy
	// closing is closed when the socket closes: a request waiting for something slow (a dry
	// run's backstore checks) answers then rather than hold up the shutdown.
	closing chan struct{}
	conns   *connTable
	wg      sync.WaitGroup
}

// Listen makes the socket at path: its directory with mode 0750 if missing, a stale
// socket file (one nobody answers on, left by a daemon that did not exit cleanly) replaced,
// mode 0660 and, when group is set, that group. With open (--control-read-group) the modes
// are 0755 and 0666 (controlSocketOpenMode). A socket another process answers on is not taken
// over: that is a second daemon.
func Listen(path, group string, open bool, log *zap.Logger) (*net.UnixListener, error) {
	dirMode, sockMode := os.FileMode(controlDirMode), os.FileMode(controlSocketMode)
	if open {
		dirMode, sockMode = controlDirOpenMode, controlSocketOpenMode
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, err
		}
		gid = g
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return nil, fmt.Errorf("control socket: making its directory: %w%s", err, controlPermHint(err))
		}
		// MkdirAll's mode is masked by the umask: set it as documented.
		if err := os.Chmod(dir, dirMode); err != nil {
			return nil, fmt.Errorf("control socket: %w", err)
		}
		if gid >= 0 {
			if err := os.Chown(dir, -1, gid); err != nil {
				return nil, fmt.Errorf("control socket: giving its directory to group %s: %w", group, err)
			}
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("control socket: %s exists and is not a socket: remove it or choose another path with --control", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("control socket: %s: another process (a second srptarget?) answers on it; stop it or choose another path with --control", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket: removing the stale socket: %w", err)
		}
		log.Info("replaced a stale control socket", zap.String("path", path))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w%s", err, controlPermHint(err))
	}
	// bind(2) makes the file with the umask applied; until the chmod the directory (0750)
	// keeps others out.
	if err := os.Chmod(path, sockMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("control socket: giving it to group %s: %w", group, err)
		}
	}
	return ln, nil
}

// controlPermHint is the fix for a socket the daemon's user may not make.
func controlPermHint(err error) string {
	if !errors.Is(err, os.ErrPermission) {
		return ""
	}
	return `; run as root, give the daemon's user the directory (systemd: RuntimeDirectory=srptarget), or choose another path with --control (--control "" for none)`
}

// lookupGroup resolves a group name (getgrnam(3)) or number; a number need not be in the
// group database.
func lookupGroup(group string) (int, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		if gid, nerr := strconv.ParseUint(group, 10, 31); nerr == nil {
			return int(gid), nil
		}
		return 0, fmt.Errorf("control socket: group %q: %w", group, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("control socket: group %q: gid %q: %w", group, g.Gid, err)
	}
	return gid, nil
}

// Serve serves requests on ln (from Listen), at path, with b's answers until Close.
func Serve(ln *net.UnixListener, path string, policy Policy, b Backend, log *zap.Logger) *Server {
	log = log.With(zap.String("control", path))
	s := &Server{
		backend: b,
		log:     log,
		path:    path,
		ln:      accept.NewListener(ln, "control socket", 0, log),
		policy:  policy,
		closing: make(chan struct{}),
		conns:   newConnTable(log),
	}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("control socket: accepting failed: no more control requests", zap.Error(err))
			}
			return
		}
		p, err := peerOf(c)
		if err != nil {
			s.conns.refuse(c, p, "the daemon cannot tell who connects: "+err.Error())
			continue
		}
		cc := &controlConn{c: c, peer: p, access: s.policy.access(p)}
		if cc.access == accessNone {
			s.conns.refuse(c, p, s.policy.refusal(p, ""))
			continue
		}
		if !s.conns.admit(cc) {
			s.conns.refuse(c, p, fmt.Sprintf("too many requests in progress (%d): try again", controlMaxConns))
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(cc)
			s.conns.remove(cc)
			_ = c.Close()
		}()
	}
}

// serveConn answers request lines until the client closes, sends a line too long or idles.
func (s *Server) serveConn(cc *controlConn) {
	c := cc.c
	r := bufio.NewReaderSize(c, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(controlIdle))
		line, err := readLine(r, controlMaxLine)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				_ = writeResponse(c, Response{Version: Version, Error: err.Error()})
			}
			return
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		s.conns.setBusy(cc, true)
		rsp := s.handle(line, cc)
		_ = c.SetWriteDeadline(time.Now().Add(controlIdle))
		err = writeResponse(c, rsp)
		s.conns.setBusy(cc, false)
		select {
		case <-s.closing:
			return
		default:
		}
		if err != nil {
			return
		}
	}
}

// handle answers one request line of cc.
func (s *Server) handle(line []byte, cc *controlConn) Response {
	req, err := decodeRequest(line)
	if err != nil {
		return Response{Version: Version, Error: err.Error()}
	}
	if cc.access < needs(req) {
		return Response{Version: Version, Error: s.policy.refusal(cc.peer, req.Command)}
	}
	if req.Command == "reload" {
		// Who reloads, or plans a reload, is in the log, with the client's own credentials.
		s.log.Info("reload requested on the control socket", append(cc.peer.fields(), zap.Bool("dry_run", req.DryRun),
			zap.String("candidate", req.ConfigName), zap.Bool("candidate_sent", req.ConfigYAML != ""))...)
	}
	var result any
	switch req.Command {
	case "status":
		result = s.backend.Status()
	case "log-level":
		result, err = s.backend.LogLevel(req.Level, s.log.With(cc.peer.fields()...))
	case "sessions":
		result = s.backend.Sessions()
	case "luns":
		result, err = s.backend.LUNs()
	case "stats":
		result = s.backend.Stats()
	case "reload":
		if req.ConfigYAML != "" && !req.DryRun {
			err = errors.New("a configuration sent with the request can only be planned (dry run), not applied: write the file and reload")
			break
		}
		r := ReloadRequest{DryRun: req.DryRun, ConfigName: req.ConfigName, Trusted: s.policy.trusted(cc.peer),
			Closing: s.closing, Log: s.log}
		if req.ConfigYAML != "" {
			r.Config = []byte(req.ConfigYAML)
		}
		result, err = s.backend.Reload(r)
	case "acl-check":
		result, err = s.backend.ACLCheck(req.Initiator, req.Source)
	default:
		err = fmt.Errorf("unknown command %q", req.Command)
	}
	if err != nil {
		return Response{Version: Version, Error: err.Error()}
	}
	b, err := json.Marshal(result)
	if err != nil {
		return Response{Version: Version, Error: fmt.Sprintf("encoding the answer: %v", err)}
	}
	return Response{Version: Version, OK: true, Result: b}
}

// Close stops accepting requests, ends the connections and removes the socket file (the
// listener unlinks the file it made, net.UnixListener.SetUnlinkOnClose). A request in
// progress gets its answer (a dry run still waiting answers that the daemon shuts down) for
// controlCloseGrace; then its connection is closed too.
func (s *Server) Close() {
	close(s.closing)
	_ = s.ln.Close()
	s.conns.closeAll(false)
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(controlCloseGrace):
		s.conns.closeAll(true)
		<-done
	}
}
