package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

// The control socket: a Unix stream socket (unix(7)) on which the daemon answers the
// operator's commands (srptarget status, sessions, luns, stats, reload, acl-check). Each
// request is one JSON object on one line, each answer too, both with a protocol version. There
// is deliberately no TCP form: who may talk to the daemon is decided by the socket file's owner,
// group and mode (0660), as for other system daemons' control sockets.

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
	// controlMaxLine bounds a request line; requests are a few hundred bytes.
	controlMaxLine = 64 << 10
	// controlIdle closes a connection that sends no request for this long.
	controlIdle = time.Minute
	// controlMaxConns bounds the connections served at once.
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
}

// controlResponse is one answer line. OK is false when the request could not be answered at
// all (Error says why); a reload that was refused is answered OK with its errors in Result.
type controlResponse struct {
	Version int             `json:"version"`
	OK      bool            `json:"ok"`
	Error   string          `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

type statusInfo struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Config  string `json:"config"`
	// State is "serving", or "waiting for an RDMA device" (serve started before the device).
	State            string         `json:"state"`
	Started          time.Time      `json:"started"`
	UptimeSeconds    float64        `json:"uptime_seconds"`
	IDExt            string         `json:"id_ext"`
	IOCGUID          string         `json:"ioc_guid"`
	IdentityFrom     string         `json:"identity_from"`
	Listeners        []listenerInfo `json:"listeners"`
	Devices          []string       `json:"devices"`
	DevicesError     string         `json:"devices_error,omitempty"`
	BufferPoolInUse  int64          `json:"buffer_pool_in_use"`
	BufferPoolSize   int64          `json:"buffer_pool_size"`
	Sessions         int            `json:"sessions"`
	Channels         int            `json:"channels"`
	CommandsInFlight int            `json:"commands_in_flight"`
}

type listenerInfo struct {
	Address string `json:"address"`
	// State is "listening", or "failed" (its device went away; a reload listens again).
	State string `json:"state"`
}

// aclRef names the ACL that admitted an initiator: its index under acls and who it lists.
type aclRef struct {
	Index       int    `json:"index"`
	Description string `json:"description"`
}

type lunRef struct {
	LUN      int  `json:"lun"`
	ReadOnly bool `json:"read_only"`
}

type sessionInfo struct {
	Initiator string   `json:"initiator"`
	Sources   []string `json:"sources"`
	// ACL is nil when the session's LUN map belongs to no ACL of the running configuration.
	ACL              *aclRef       `json:"acl"`
	LUNs             []lunRef      `json:"luns"`
	Channels         []channelInfo `json:"channels"`
	CommandsInFlight int           `json:"commands_in_flight"`
	LoginTime        time.Time     `json:"login_time"`
}

type channelInfo struct {
	ID               uint64    `json:"id"`
	Source           string    `json:"source"`
	QPNum            uint32    `json:"qp_num"`
	Credits          int       `json:"credits"`
	CreditsHeld      int64     `json:"credits_held"`
	CommandsInFlight int       `json:"commands_in_flight"`
	LoginTime        time.Time `json:"login_time"`
}

type lunInfo struct {
	LUN       int    `json:"lun"`
	Backstore string `json:"backstore"`
	Path      string `json:"path,omitempty"`
	Size      uint64 `json:"size"`
	BlockSize uint32 `json:"block_size"`
	ReadOnly  bool   `json:"read_only"`
	// WriteCache is the WCE bit now, which an initiator may have changed with MODE SELECT.
	WriteCache       bool     `json:"write_cache"`
	ThinProvisioning bool     `json:"thin_provisioning"`
	Serial           string   `json:"serial"`
	Sessions         []string `json:"sessions"`
	// Reservations are the SCSI persistent reservations, when an initiator registered.
	Reservations *prInfo `json:"persistent_reservations,omitempty"`
}

// prInfo is what `srptarget luns` shows of a LUN's persistent reservations.
type prInfo struct {
	Generation uint32 `json:"generation"`
	// Type is the reservation type (SPC-4 table 212), 0 when nothing is reserved.
	Type          uint8            `json:"type"`
	Registrations []prRegistration `json:"registrations"`
}

type prRegistration struct {
	Key            string `json:"key"`
	Initiator      string `json:"initiator"`
	RelativePort   uint16 `json:"relative_target_port"`
	AllTargetPorts bool   `json:"all_target_ports,omitempty"`
	Holder         bool   `json:"holder,omitempty"`
}

// statEntry is one counter of srp.Target.Stats, in the order the struct has them.
type statEntry struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// reloadResult is what a reload did, or with DryRun would do.
type reloadResult struct {
	DryRun bool `json:"dry_run"`
	// Applied is true when the new configuration runs now.
	Applied bool `json:"applied"`
	// Errors are the reasons a reload is refused, as the log has them (file:line: key: ...).
	Errors           []string        `json:"errors,omitempty"`
	Warnings         []string        `json:"warnings,omitempty"`
	LUNsAdded        []int           `json:"luns_added"`
	LUNsChanged      []int           `json:"luns_changed"`
	LUNsRemoved      []int           `json:"luns_removed"`
	LUNsUnchanged    []int           `json:"luns_unchanged"`
	ListenersAdded   []string        `json:"listeners_added"`
	ListenersRemoved []string        `json:"listeners_removed"`
	Sessions         []sessionChange `json:"sessions"`
	// PortGroupsChanged describes each ALUA target port group whose state, preference or
	// ports change ("group 2: standby -> active/optimized").
	PortGroupsChanged []string `json:"port_groups_changed"`

	// candidate, when set, is the configuration a dry run plans instead of the daemon's file
	// (validate --diff), named candidateName.
	candidate     []byte
	candidateName string
}

// sessionChange is what a reload does to one logged-in initiator: the LUNs it loses (removed
// from its map, or replaced by a changed logical unit), the LUNs it gains, and whether it is
// disconnected (no ACL admits it any more) or some of its channels are (their sources are
// granted other LUNs than its first channel's).
type sessionChange struct {
	Initiator            string `json:"initiator"`
	LosesLUNs            []int  `json:"loses_luns,omitempty"`
	ChangedLUNs          []int  `json:"changed_luns,omitempty"`
	GainsLUNs            []int  `json:"gains_luns,omitempty"`
	Disconnected         bool   `json:"disconnected,omitempty"`
	ChannelsDisconnected int    `json:"channels_disconnected,omitempty"`
}

// aclCheckResult answers acl-check.
type aclCheckResult struct {
	// From is "daemon" (the running configuration) or the configuration file read locally.
	From      string  `json:"from"`
	Initiator string  `json:"initiator"`
	Source    string  `json:"source,omitempty"`
	ACL       *aclRef `json:"acl"`
	// LUNs are what the initiator would see; Refusal what the log would say when none admits it.
	LUNs    []lunRef `json:"luns"`
	Refusal string   `json:"refusal,omitempty"`
}

// controlServer serves the control socket of one daemon.
type controlServer struct {
	// daemon is nil while serve waits for an RDMA device (startWhenDevice): status then says
	// so, and the other commands answer that the daemon is not serving yet.
	daemon  atomic.Pointer[daemon]
	opts    daemonOptions
	log     *zap.Logger
	path    string
	ln      *net.UnixListener
	started time.Time
	sem     chan struct{}

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// listenControl makes the socket at path: its directory with mode 0750 if missing, a stale
// socket file (one nobody answers on, left by a daemon that did not exit cleanly) replaced,
// mode 0660 and, when group is set, that group. A socket another process answers on is not
// taken over: that is a second daemon.
func listenControl(path, group string, log *zap.Logger) (*net.UnixListener, error) {
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
		if err := os.MkdirAll(dir, controlDirMode); err != nil {
			return nil, fmt.Errorf("control socket: making its directory: %w%s", err, controlPermHint(err))
		}
		// MkdirAll's mode is masked by the umask: set it as documented.
		if err := os.Chmod(dir, controlDirMode); err != nil {
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
	if err := os.Chmod(path, controlSocketMode); err != nil {
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

// lookupGroup resolves a group name or number (getgrnam(3)).
func lookupGroup(group string) (int, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		var uerr error
		g, uerr = user.LookupGroupId(group)
		if uerr != nil {
			return 0, fmt.Errorf("control socket: group %q: %w", group, err)
		}
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("control socket: group %q: gid %q: %w", group, g.Gid, err)
	}
	return gid, nil
}

// serveControl serves requests on ln (from listenControl) until close, about the daemon that
// setDaemon names once it has started.
func serveControl(ln *net.UnixListener, path string, opts daemonOptions) *controlServer {
	s := &controlServer{
		opts:    opts,
		log:     opts.log.With(zap.String("control", path)),
		path:    path,
		ln:      ln,
		started: time.Now(),
		sem:     make(chan struct{}, controlMaxConns),
		conns:   make(map[net.Conn]struct{}),
	}
	s.wg.Add(1)
	go s.accept()
	return s
}

// setDaemon makes d the daemon the requests are about.
func (s *controlServer) setDaemon(d *daemon) { s.daemon.Store(d) }

// errNotServing answers the commands that need a started daemon while serve waits.
var errNotServing = errors.New("the daemon is waiting for an RDMA device and serves nothing yet (srptarget status says why)")

func (s *controlServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("control socket: accept failed: no more control requests", zap.Error(err))
			}
			return
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.log.Warn("control socket: too many connections, closing one", zap.Int("max", controlMaxConns))
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
			<-s.sem
		}()
	}
}

// serveConn answers request lines until the client closes, sends a line too long or idles.
func (s *controlServer) serveConn(c net.Conn) {
	r := bufio.NewReaderSize(c, 4096)
	enc := json.NewEncoder(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(controlIdle))
		line, err := readLine(r, controlMaxLine)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				_ = enc.Encode(controlResponse{Version: controlVersion, Error: err.Error()})
			}
			return
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		rsp := s.handle(line)
		_ = c.SetWriteDeadline(time.Now().Add(controlIdle))
		if err := enc.Encode(rsp); err != nil {
			return
		}
	}
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

// handle answers one request line.
func (s *controlServer) handle(line []byte) controlResponse {
	var req controlRequest
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return controlResponse{Version: controlVersion, Error: "malformed request: " + err.Error()}
	}
	if req.Version != controlVersion {
		return controlResponse{Version: controlVersion, Error: fmt.Sprintf("protocol version %d is not supported: this daemon speaks version %d", req.Version, controlVersion)}
	}
	var result any
	var err error
	d := s.daemon.Load()
	switch req.Command {
	case "status":
		result = s.status(d)
	case "sessions", "luns", "stats", "reload", "acl-check":
		if d == nil {
			err = errNotServing
			break
		}
		switch req.Command {
		case "sessions":
			result = d.sessionsInfo()
		case "luns":
			result = d.lunsInfo()
		case "stats":
			result = append(statEntries(d.target.Stats()),
				statEntry{"reloads_applied", int64(d.reloadsApplied.Load())},
				statEntry{"reloads_failed", int64(d.reloadsFailed.Load())})
		case "reload":
			s.log.Info("reload requested on the control socket", zap.Bool("dry_run", req.DryRun))
			// The outcome is in the result either way, errors included. systemd hears of it
			// as of a SIGHUP reload.
			if req.ConfigYAML != "" && !req.DryRun {
				err = errors.New("a configuration sent with the request can only be planned (dry run), not applied: write the file and reload")
				break
			}
			if !req.DryRun {
				notifyReloading(s.log)
			}
			var rerr error
			if req.ConfigYAML != "" {
				result, rerr = d.reloadReportText(req.ConfigName, []byte(req.ConfigYAML))
			} else {
				result, rerr = d.reloadReport(req.DryRun)
			}
			if !req.DryRun {
				notifyReloaded(s.log, rerr)
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
// listener unlinks the file it made, net.UnixListener.SetUnlinkOnClose).
func (s *controlServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// deviceNames lists the RDMA devices for status, or says why it cannot.
func deviceNames(devices devicesFunc) (names []string, why string) {
	names = []string{}
	if devices == nil {
		return names, errNoRDMA.Error()
	}
	devs, err := devices()
	if err != nil {
		return names, err.Error()
	}
	for _, dev := range devs {
		names = append(names, dev.Name)
	}
	slices.Sort(names)
	return names, ""
}

func (s *controlServer) status(d *daemon) statusInfo {
	st := statusInfo{
		Version:       version,
		PID:           os.Getpid(),
		Config:        s.opts.configFile,
		State:         "serving",
		Started:       s.started.UTC().Truncate(time.Second),
		UptimeSeconds: time.Since(s.started).Round(time.Second).Seconds(),
		Listeners:     []listenerInfo{},
		Devices:       []string{},
	}
	if d == nil {
		st.State = "waiting for an RDMA device"
		st.Devices, st.DevicesError = deviceNames(s.opts.devices)
		return st
	}
	d.mu.Lock()
	st.IDExt = fmt.Sprintf("%016x", d.ident.idExt)
	st.IOCGUID = fmt.Sprintf("%016x", d.ident.iocGUID)
	st.IdentityFrom = d.ident.from
	for ap, ls := range d.listeners {
		state := "listening"
		if ls.failed.Load() {
			state = "failed"
		}
		st.Listeners = append(st.Listeners, listenerInfo{Address: ap.String(), State: state})
	}
	d.mu.Unlock()
	slices.SortFunc(st.Listeners, func(a, b listenerInfo) int { return strings.Compare(a.Address, b.Address) })
	st.Devices, st.DevicesError = deviceNames(d.opts.devices)
	st.BufferPoolInUse, st.BufferPoolSize = d.target.PoolUse()
	for _, si := range d.target.Sessions() {
		st.Sessions++
		st.Channels += len(si.ChannelInfo)
		for _, ci := range si.ChannelInfo {
			st.CommandsInFlight += ci.InFlight
		}
	}
	return st
}

// aclOf returns the ACL of the running configuration whose LUN map m is, or nil.
func (a *aclAuthorizer) aclOf(m *scsi.LUNMap) *aclEntry {
	if a == nil || m == nil {
		return nil
	}
	for _, e := range a.acls {
		if e.lunMap == m {
			return e
		}
	}
	return nil
}

// describe is a short description of an ACL: who it lists.
func (e *aclEntry) describe() *aclRef {
	var who []string
	if len(e.cfg.Initiators) > 0 {
		who = append(who, "initiators "+strings.Join(e.cfg.Initiators, ", "))
	}
	if len(e.cfg.Sources) > 0 {
		who = append(who, "sources "+strings.Join(e.cfg.Sources, ", "))
	}
	desc := strings.Join(who, " or ")
	if e.cfg.ReadOnly {
		desc += ", read-only"
	}
	return &aclRef{Index: e.index, Description: desc}
}

// lunRefs lists the LUNs of a map, in LUN order.
func lunRefs(m *scsi.LUNMap) []lunRef {
	out := []lunRef{}
	if m == nil {
		return out
	}
	for i := range m.Mappings() {
		mp := &m.Mappings()[i]
		out = append(out, lunRef{LUN: int(mp.LUN), ReadOnly: mp.WriteProtected()})
	}
	slices.SortFunc(out, func(a, b lunRef) int { return a.LUN - b.LUN })
	return out
}

func (d *daemon) sessionsInfo() []sessionInfo {
	d.mu.Lock()
	auth := d.auth
	d.mu.Unlock()
	out := []sessionInfo{}
	for _, si := range d.target.Sessions() {
		s := sessionInfo{Initiator: si.InitiatorPortID.String(), LUNs: lunRefs(si.LUNMap), Channels: []channelInfo{}}
		if e := auth.aclOf(si.LUNMap); e != nil {
			s.ACL = e.describe()
		}
		for _, ci := range si.ChannelInfo {
			src := ci.Remote.Addr().Unmap().String()
			if !slices.Contains(s.Sources, src) {
				s.Sources = append(s.Sources, src)
			}
			s.Channels = append(s.Channels, channelInfo{
				ID: ci.ID, Source: ci.Remote.String(), QPNum: ci.QPNum, Credits: ci.Credits,
				CreditsHeld: ci.CreditsHeld, CommandsInFlight: ci.InFlight, LoginTime: ci.LoginTime.UTC(),
			})
			s.CommandsInFlight += ci.InFlight
			if s.LoginTime.IsZero() || ci.LoginTime.Before(s.LoginTime) {
				s.LoginTime = ci.LoginTime.UTC()
			}
		}
		out = append(out, s)
	}
	return out
}

func (d *daemon) lunsInfo() []lunInfo {
	sessions := d.target.Sessions()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []lunInfo{}
	for _, st := range d.luns {
		l := lunInfo{
			LUN:              st.num,
			Backstore:        string(st.cfg.Backstore),
			Path:             st.cfg.Path,
			Size:             st.lu.Blocks() * uint64(st.lu.BlockSize()),
			BlockSize:        st.lu.BlockSize(),
			ReadOnly:         st.key.readOnly,
			WriteCache:       st.lu.WriteCacheEnabled(),
			ThinProvisioning: st.key.thin,
			Serial:           st.key.serial,
			Sessions:         []string{},
		}
		if regs, typ, gen := st.lu.Reservations().Registrations(); len(regs) > 0 {
			l.Reservations = &prInfo{Generation: gen, Type: typ}
			for _, r := range regs {
				l.Reservations.Registrations = append(l.Reservations.Registrations, prRegistration{
					Key:            fmt.Sprintf("0x%x", r.Key),
					Initiator:      iu.PortID(r.Initiator).String(),
					RelativePort:   r.RelativePort,
					AllTargetPorts: r.AllTargetPorts,
					Holder:         r.Holder || typ >= scsi.PRTypeWriteExclusiveAllRegistrants,
				})
			}
		}
		for _, si := range sessions {
			if si.LUNMap == nil {
				continue
			}
			for _, mp := range si.LUNMap.Mappings() {
				if mp.LU == st.lu {
					l.Sessions = append(l.Sessions, si.InitiatorPortID.String())
					break
				}
			}
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b lunInfo) int { return a.LUN - b.LUN })
	return out
}

// statEntries lists the target's counters in the order of srp.Stats, named in snake case.
func statEntries(s srp.Stats) []statEntry {
	out := []statEntry{
		{"logins_accepted", int64(s.LoginsAccepted)},
		{"logins_rejected", int64(s.LoginsRejected)},
	}
	for i, n := range s.Rejects {
		out = append(out, statEntry{fmt.Sprintf("logins_rejected_%s", rejectName(i)), int64(n)})
	}
	return append(out,
		statEntry{"channels_open", s.ChannelsOpen},
		statEntry{"channels_closed", int64(s.ChannelsClosed)},
		statEntry{"commands", int64(s.Commands)},
		statEntry{"task_mgmt", int64(s.TaskMgmt)},
		statEntry{"aborted", int64(s.Aborted)},
		statEntry{"bytes_in", int64(s.BytesIn)},
		statEntry{"bytes_out", int64(s.BytesOut)},
		statEntry{"transport_errors", int64(s.TransportErrors)},
		statEntry{"protocol_errors", int64(s.ProtocolErrors)},
		statEntry{"rdma_errors", int64(s.RDMAErrors)},
		statEntry{"buffer_waits", int64(s.BufferWaits)},
		statEntry{"buffer_busy", int64(s.BufferBusy)},
		statEntry{"rdma_stalls", int64(s.RDMAStalls)},
		statEntry{"credit_violations", int64(s.CreditViolations)},
		statEntry{"credit_requests", int64(s.CreditRequests)},
		statEntry{"pool_in_use", s.PoolInUse},
		statEntry{"pool_high_mark", s.PoolHighMark},
		statEntry{"send_posts", int64(s.SendPosts)},
		statEntry{"send_wrs", int64(s.SendWRs)},
	)
}

// rejectName names srp.Stats.Rejects[i]: the SRP_LOGIN_REJ reason 0x00010000+i (SRP r16a,
// table 10).
func rejectName(i int) string {
	names := [...]string{"unable_establish_channel", "insufficient_resources", "req_it_iu_length_too_large",
		"unable_associate_channel", "unsupported_descriptor_fmt", "multi_channel_unsupported", "channel_limit_reached"}
	if i < len(names) {
		return names[i]
	}
	return strconv.Itoa(i)
}

// pathExists reports whether something (a link included) is at path.
func pathExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// describePlan fills in what committing p would change besides the LUNs: listeners, and the
// logged-in initiators that lose or gain LUNs or are disconnected, found by asking the plan's
// ACLs about each channel as Target.SetAuthorizer will.
func (d *daemon) describePlan(p *plan, res *reloadResult) {
	res.ListenersAdded, res.ListenersRemoved, res.Sessions = []string{}, []string{}, []sessionChange{}
	for _, ls := range p.newListeners {
		res.ListenersAdded = append(res.ListenersAdded, ls.addr.String())
	}
	for _, ap := range p.wouldListen {
		res.ListenersAdded = append(res.ListenersAdded, ap.String())
	}
	for ap := range d.listeners {
		if !p.keep[ap] {
			res.ListenersRemoved = append(res.ListenersRemoved, ap.String())
		}
	}
	slices.Sort(res.ListenersAdded)
	slices.Sort(res.ListenersRemoved)
	res.PortGroupsChanged = portGroupChanges(d.alua.Groups(), p.cfg.PortGroups())
	for _, si := range d.target.Sessions() {
		sc := sessionChange{Initiator: si.InitiatorPortID.String()}
		var keep *scsi.LUNMap
		for _, ci := range si.ChannelInfo {
			m, err := p.auth.Authorize(si.InitiatorPortID, si.TargetPortID, ci.Remote)
			switch {
			case err != nil || m == nil:
				sc.ChannelsDisconnected++
			case keep == nil:
				keep = m
			case !sameLUNs(m, keep):
				sc.ChannelsDisconnected++
			}
		}
		oldLUs := map[int]*scsi.LogicalUnit{}
		if si.LUNMap != nil {
			for _, mp := range si.LUNMap.Mappings() {
				oldLUs[int(mp.LUN)] = mp.LU
			}
		}
		newLUs := map[int]*scsi.LogicalUnit{}
		if keep == nil {
			sc.Disconnected = true
		} else {
			for _, mp := range keep.Mappings() {
				newLUs[int(mp.LUN)] = mp.LU
			}
		}
		for n, lu := range oldLUs {
			switch nlu, ok := newLUs[n]; {
			case !ok:
				sc.LosesLUNs = append(sc.LosesLUNs, n)
			case nlu != lu:
				sc.ChangedLUNs = append(sc.ChangedLUNs, n)
			}
		}
		for n := range newLUs {
			if _, ok := oldLUs[n]; !ok {
				sc.GainsLUNs = append(sc.GainsLUNs, n)
			}
		}
		if sc.Disconnected || sc.ChannelsDisconnected > 0 || len(sc.LosesLUNs)+len(sc.ChangedLUNs)+len(sc.GainsLUNs) > 0 {
			for _, s := range [][]int{sc.LosesLUNs, sc.ChangedLUNs, sc.GainsLUNs} {
				slices.Sort(s)
			}
			res.Sessions = append(res.Sessions, sc)
		}
	}
}

// sameLUNs reports whether two LUN maps give the same logical units under the same numbers
// with the same access.
func sameLUNs(a, b *scsi.LUNMap) bool {
	am, bm := a.Mappings(), b.Mappings()
	if len(am) != len(bm) {
		return false
	}
	for _, x := range am {
		if !slices.ContainsFunc(bm, func(y scsi.Mapping) bool {
			return x.LUN == y.LUN && x.LU == y.LU && x.ReadOnly == y.ReadOnly
		}) {
			return false
		}
	}
	return true
}

// parseInitiator reads an initiator port identifier as the log prints it: 0x and 32 hex
// digits (colons allowed), and returns it in that form.
func parseInitiator(s string) (iu.PortID, error) {
	var p iu.PortID
	h := strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"), ":", "")
	if len(h) != 32 {
		return p, fmt.Errorf("initiator %q: want 0x and 32 hex digits, as the log prints it (0x00000000000000000002c90300a0b0c2)", s)
	}
	for i := range p {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return p, fmt.Errorf("initiator %q: want 0x and 32 hex digits: %w", s, err)
		}
		p[i] = byte(v)
	}
	return p, nil
}

// parseSource reads --source: an IP address, with or without a port.
func parseSource(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("source %q: not an IP address: %w", s, err)
	}
	return a.Unmap().WithZone(""), nil
}

// match returns the first ACL that admits the initiator from src, as Authorize decides.
func (a *aclAuthorizer) match(id string, src netip.Addr) *aclEntry {
	for _, e := range a.acls {
		if e.matches(id, src) {
			return e
		}
	}
	return nil
}

// aclCheck answers which ACL of the running configuration admits the initiator and which
// LUNs it sees.
func (d *daemon) aclCheck(initiator, source string) (*aclCheckResult, error) {
	id, err := parseInitiator(initiator)
	if err != nil {
		return nil, err
	}
	src, err := parseSource(source)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	auth := d.auth
	d.mu.Unlock()
	res := &aclCheckResult{From: "daemon", Initiator: id.String(), LUNs: []lunRef{}}
	if src.IsValid() {
		res.Source = src.String()
	}
	if e := auth.match(id.String(), src); e != nil {
		res.ACL = e.describe()
		res.LUNs = lunRefs(e.lunMap)
	} else {
		res.Refusal = auth.refusal(id.String(), src)
	}
	return res, nil
}

// aclCheckFile answers acl-check from a configuration file, without a daemon: the same
// matching, on the ACLs as written (LUN read_only flags included).
func aclCheckFile(file, initiator, source string) (*aclCheckResult, error) {
	id, err := parseInitiator(initiator)
	if err != nil {
		return nil, err
	}
	src, err := parseSource(source)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	a := &aclAuthorizer{}
	roLUN := map[int]bool{}
	for _, l := range cfg.LUNs {
		a.luns = append(a.luns, *l.LUN)
		roLUN[*l.LUN] = l.ReadOnly
	}
	slices.Sort(a.luns)
	for i := range cfg.ACLs {
		e, cerr := newACLEntry(cfg, i)
		if cerr != nil {
			return nil, cerr
		}
		a.acls = append(a.acls, e)
	}
	res := &aclCheckResult{From: file, Initiator: id.String(), LUNs: []lunRef{}}
	if src.IsValid() {
		res.Source = src.String()
	}
	if e := a.match(id.String(), src); e != nil {
		res.ACL = e.describe()
		for _, n := range e.cfg.LUNs {
			res.LUNs = append(res.LUNs, lunRef{LUN: n, ReadOnly: e.cfg.ReadOnly || roLUN[n]})
		}
		slices.SortFunc(res.LUNs, func(a, b lunRef) int { return a.LUN - b.LUN })
	} else {
		res.Refusal = a.refusal(id.String(), src)
	}
	return res, nil
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
	req.Version = controlVersion
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("control socket %s: sending the request: %w", path, err)
	}
	line, err := readLine(bufio.NewReader(c), 64<<20)
	if err != nil {
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

// portGroupChanges describes how the target port groups change from old to new, one line per
// group that is added, removed or changed, in group order.
func portGroupChanges(old, new []scsi.PortGroup) []string {
	desc := func(g scsi.PortGroup) string {
		s := fmt.Sprintf("%v, ports %v", g.State, g.Ports)
		if g.Preferred {
			s += ", preferred"
		}
		return s
	}
	byID := func(gs []scsi.PortGroup) map[uint16]scsi.PortGroup {
		m := make(map[uint16]scsi.PortGroup, len(gs))
		for _, g := range gs {
			m[g.ID] = g
		}
		return m
	}
	o, n := byID(old), byID(new)
	ids := make([]uint16, 0, len(o)+len(n))
	for id := range o {
		ids = append(ids, id)
	}
	for id := range n {
		if _, ok := o[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []string{}
	for _, id := range ids {
		og, inOld := o[id]
		ng, inNew := n[id]
		switch {
		case !inNew:
			out = append(out, fmt.Sprintf("group %d: removed (was %s)", id, desc(og)))
		case !inOld:
			out = append(out, fmt.Sprintf("group %d: added (%s)", id, desc(ng)))
		case desc(og) != desc(ng):
			out = append(out, fmt.Sprintf("group %d: %s -> %s", id, desc(og), desc(ng)))
		}
	}
	return out
}
