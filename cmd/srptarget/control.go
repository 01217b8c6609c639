package main

import (
	"bufio"
	"context"
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
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/internal/loglimit"
)

// The control socket: a Unix stream socket (unix(7)) on which the daemon answers the
// operator's commands (srptarget status, sessions, luns, stats, reload, acl-check). Each
// request is one JSON object on one line, each answer too, both with a protocol version. There
// is deliberately no TCP form: who may talk to the daemon is decided by the socket file's owner,
// group and mode (0660), as for other system daemons' control sockets, and by each client's
// credentials, which the kernel gives the daemon (controlPolicy).

// DefaultControlSocket is where serve listens and the commands connect unless told otherwise
// (/run is the FHS place for runtime sockets; systemd's RuntimeDirectory=srptarget makes the
// directory).
const DefaultControlSocket = "/run/srptarget/control.sock"

// controlVersion is the version of the request and answer format. A daemon answers a request
// of another version with an error, so that an old client never misreads a new answer.
const controlVersion = 1

const (
	controlSocketMode = 0o660
	controlDirMode    = 0o750
	// With --control-read-group the socket and the directory the daemon makes for it are open
	// to every local user: two groups cannot own one file, so the daemon decides alone, by
	// each client's credentials, as the D-Bus system bus does with its socket.
	controlSocketOpenMode = 0o666
	controlDirOpenMode    = 0o755
	// controlMaxLine bounds a request line; requests are a few hundred bytes.
	controlMaxLine = 64 << 10
	// controlIdle closes a connection that sends no request for this long.
	controlIdle = time.Minute
	// controlCloseGrace is how long closing the socket waits for the answers in progress.
	controlCloseGrace = 2 * time.Second
	// controlMaxConns bounds the connections served at once; a new one takes the place of the
	// one idle longest (admit).
	controlMaxConns = 16
)

// controlRequest is one request line.
type controlRequest struct {
	Version   int    `json:"version"`
	Command   string `json:"command"`
	DryRun    bool   `json:"dry_run,omitempty"`
	Initiator string `json:"initiator,omitempty"`
	Source    string `json:"source,omitempty"`
	// ConfigYAML, for a dry-run reload only (validate --diff), is a configuration to plan
	// instead of the daemon's file, named ConfigName in messages. The client sends the text:
	// the daemon reads no file a client names.
	ConfigYAML string `json:"config_yaml,omitempty"`
	ConfigName string `json:"config_name,omitempty"`
	// Level, for log-level, is the level to log at from now on; empty asks which it is.
	Level string `json:"level,omitempty"`
}

// controlResponse is one answer line. OK is false when the request could not be answered at
// all (Error says why); a reload that was refused is answered OK with its errors in Result.
type controlResponse struct {
	Version int             `json:"version"`
	OK      bool            `json:"ok"`
	Error   string          `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// controlServer serves the control socket of one daemon.
type controlServer struct {
	// daemon is nil while serve waits for an RDMA device (startWhenDevice): status then says
	// so, and the other commands answer that the daemon is not serving yet.
	daemon  atomic.Pointer[daemon]
	opts    daemonOptions
	log     *zap.Logger
	path    string
	ln      *steadyListener
	started time.Time
	policy  controlPolicy
	// closing is closed when the socket closes: a request waiting for something slow (a dry
	// run's backstore checks) answers then rather than hold up the shutdown.
	closing   chan struct{}
	refuseLog *loglimit.Locked
	evictLog  *loglimit.Locked

	// retry asks a serve that waits for a device to try to start now (a reload while it
	// waits found the configuration valid), as SIGHUP does.
	retry chan struct{}

	mu    sync.Mutex
	conns map[*controlConn]struct{}
	wg    sync.WaitGroup
}

// listenControl makes the socket at path: its directory with mode 0750 if missing, a stale
// socket file (one nobody answers on, left by a daemon that did not exit cleanly) replaced,
// mode 0660 and, when group is set, that group. With open (--control-read-group) the modes
// are 0755 and 0666 (controlSocketOpenMode). A socket another process answers on is not taken
// over: that is a second daemon.
func listenControl(path, group string, open bool, log *zap.Logger) (*net.UnixListener, error) {
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

// serveControl serves requests on ln (from listenControl) until close, about the daemon that
// setDaemon names once it has started.
func serveControl(ln *net.UnixListener, path string, policy controlPolicy, opts daemonOptions) *controlServer {
	log := opts.log.With(zap.String("control", path))
	s := &controlServer{
		opts:      opts,
		log:       log,
		path:      path,
		ln:        newSteadyListener(ln, "control socket", 0, log),
		started:   time.Now(),
		policy:    policy,
		closing:   make(chan struct{}),
		refuseLog: loglimit.NewLocked(1, logEvery),
		evictLog:  loglimit.NewLocked(1, logEvery),
		conns:     make(map[*controlConn]struct{}),
		retry:     make(chan struct{}, 1),
	}
	s.wg.Add(1)
	go s.accept()
	return s
}

// setDaemon makes d the daemon the requests are about.
func (s *controlServer) setDaemon(d *daemon) { s.daemon.Store(d) }

func (s *controlServer) accept() {
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
			s.refuse(c, p, "the daemon cannot tell who connects: "+err.Error())
			continue
		}
		cc := &controlConn{c: c, peer: p, access: s.policy.access(p)}
		if cc.access == accessNone {
			s.refuse(c, p, s.policy.refusal(p, ""))
			continue
		}
		if !s.admit(cc) {
			s.refuse(c, p, fmt.Sprintf("too many requests in progress (%d): try again", controlMaxConns))
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(cc)
			s.mu.Lock()
			delete(s.conns, cc)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serveConn answers request lines until the client closes, sends a line too long or idles.
func (s *controlServer) serveConn(cc *controlConn) {
	c := cc.c
	r := bufio.NewReaderSize(c, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(controlIdle))
		line, err := readLine(r, controlMaxLine)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				_ = writeResponse(c, controlResponse{Version: controlVersion, Error: err.Error()})
			}
			return
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		s.setBusy(cc, true)
		rsp := s.handle(line, cc)
		_ = c.SetWriteDeadline(time.Now().Add(controlIdle))
		err = writeResponse(c, rsp)
		s.setBusy(cc, false)
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

// writeResponse writes one answer line.
func writeResponse(c net.Conn, rsp controlResponse) error {
	b, err := json.Marshal(rsp)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

var errLineTooLong = fmt.Errorf("request longer than %d bytes", controlMaxLine)

// readLine reads one line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > max {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// handle answers one request line of cc.
func (s *controlServer) handle(line []byte, cc *controlConn) controlResponse {
	var req controlRequest
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return controlResponse{Version: controlVersion, Error: "malformed request: " + err.Error()}
	}
	if req.Version != controlVersion {
		return controlResponse{Version: controlVersion, Error: fmt.Sprintf("protocol version %d is not supported: this daemon speaks version %d", req.Version, controlVersion)}
	}
	if cc.access < needs(req) {
		return controlResponse{Version: controlVersion, Error: s.policy.refusal(cc.peer, req.Command)}
	}
	if req.Command == "reload" {
		// Who reloads, or plans a reload, is in the log, with the client's own credentials.
		s.log.Info("reload requested on the control socket", append(cc.peer.fields(), zap.Bool("dry_run", req.DryRun),
			zap.String("candidate", req.ConfigName), zap.Bool("candidate_sent", req.ConfigYAML != ""))...)
	}
	var result any
	var err error
	d := s.daemon.Load()
	switch req.Command {
	case "status":
		result = s.status(d)
	case "log-level":
		result, err = s.logLevel(req.Level, cc.peer)
	case "sessions", "luns", "stats", "reload", "acl-check":
		if d == nil {
			result, err = s.waitingAnswer(req, s.policy.trusted(cc.peer))
			break
		}
		switch req.Command {
		case "sessions":
			result = d.sessionsInfo()
		case "luns":
			result = d.lunsInfo()
		case "stats":
			result = append(statEntries(d.target.Stats()),
				statEntry{Name: "reloads_applied", Value: int64(d.reloadsApplied.Load())},
				statEntry{Name: "reloads_failed", Value: int64(d.reloadsFailed.Load())})
			result = append(result.([]statEntry), d.initiatorStatEntries()...)
		case "reload":
			// The outcome is in the result either way, errors included. systemd hears of it
			// as of a SIGHUP reload.
			if req.ConfigYAML != "" && !req.DryRun {
				err = errors.New("a configuration sent with the request can only be planned (dry run), not applied: write the file and reload")
				break
			}
			if !req.DryRun {
				notifyReloading(s.log)
			}
			var res *reloadResult
			var rerr error
			switch {
			case req.ConfigYAML != "":
				// A client's text: what it names is looked at only for root or the daemon's
				// own user (dryRun).
				res, rerr = d.dryRun(&candidate{name: req.ConfigName, text: []byte(req.ConfigYAML)}, s.policy.trusted(cc.peer), s.closing)
			case req.DryRun:
				res, rerr = d.dryRun(nil, true, s.closing)
			default:
				res, rerr = d.reloadReport(s.closing)
				notifyReloaded(s.log, rerr, d.statusLine())
			}
			result = res
			if errors.Is(rerr, errControlClosing) {
				err = rerr
			}
		case "acl-check":
			result, err = d.aclCheck(req.Initiator, req.Source)
		}
	default:
		err = fmt.Errorf("unknown command %q", req.Command)
	}
	if err != nil {
		return controlResponse{Version: controlVersion, Error: err.Error()}
	}
	b, err := json.Marshal(result)
	if err != nil {
		return controlResponse{Version: controlVersion, Error: fmt.Sprintf("encoding the answer: %v", err)}
	}
	return controlResponse{Version: controlVersion, OK: true, Result: b}
}

// close stops accepting requests, ends the connections and removes the socket file (the
// listener unlinks the file it made, net.UnixListener.SetUnlinkOnClose). A request in
// progress gets its answer (a dry run still waiting answers that the daemon shuts down) for
// controlCloseGrace; then its connection is closed too.
func (s *controlServer) close() {
	close(s.closing)
	_ = s.ln.Close()
	closeConns := func(busyToo bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for cc := range s.conns {
			if busyToo || !cc.busy {
				_ = cc.c.Close()
			}
		}
	}
	closeConns(false)
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(controlCloseGrace):
		closeConns(true)
		<-done
	}
}

// controlCall sends one request to the daemon at path and returns its answer's result.
func controlCall(ctx context.Context, path string, req controlRequest) (json.RawMessage, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &controlDialError{path: path, err: err}
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return controlExchange(c, path, req)
}

// controlExchange sends req on c, connected to the daemon at path, and returns its answer's
// result.
func controlExchange(c net.Conn, path string, req controlRequest) (json.RawMessage, error) {
	req.Version = controlVersion
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// A daemon that refuses the connection says why and closes it, perhaps before the request
	// is written: its answer is read even when the write failed.
	_, werr := c.Write(append(b, '\n'))
	line, err := readLine(bufio.NewReader(c), 64<<20)
	switch {
	case err != nil && werr != nil:
		return nil, fmt.Errorf("control socket %s: sending the request: %w", path, werr)
	case err != nil:
		return nil, fmt.Errorf("control socket %s: reading the answer: %w", path, err)
	}
	var rsp controlResponse
	if err := json.Unmarshal(line, &rsp); err != nil {
		return nil, fmt.Errorf("control socket %s: malformed answer: %w", path, err)
	}
	if rsp.Version != controlVersion {
		return nil, fmt.Errorf("control socket %s: the daemon answers with protocol version %d, this srptarget speaks %d: use the srptarget binary of the running daemon", path, rsp.Version, controlVersion)
	}
	if !rsp.OK {
		return nil, fmt.Errorf("the daemon refused the request: %s", rsp.Error)
	}
	return rsp.Result, nil
}

// controlDialError is a daemon that cannot be reached: not running, or the socket elsewhere or
// not ours to open.
type controlDialError struct {
	path string
	err  error
}

func (e *controlDialError) Error() string {
	hint := "is srptarget serve running? (--control PATH if it uses another socket)"
	if errors.Is(e.err, os.ErrPermission) {
		hint = "run as root or as a member of the socket's group (serve --control-group)"
	}
	return fmt.Sprintf("cannot reach the daemon on %s: %v; %s", e.path, e.err, hint)
}

func (e *controlDialError) Unwrap() error { return e.err }
