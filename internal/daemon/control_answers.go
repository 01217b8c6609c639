package daemon

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/srp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// What serve answers on the control socket: about the daemon once it has started and, while
// it waits for an RDMA device to take the target identity from, what is known then: no
// sessions, the configuration's LUNs (their serial numbers come with the identity), zero
// counters, the configuration's ACLs, and a reload that checks the file.

// controlAnswers is serve's control.Backend.
type controlAnswers struct {
	// daemon is nil while serve waits for an RDMA device (startWhenDevice).
	daemon  atomic.Pointer[daemon]
	opts    daemonOptions
	started time.Time
	// retry asks a serve that waits for a device to try to start now (a reload while it
	// waits found the configuration valid), as SIGHUP does.
	retry chan struct{}
}

func newControlAnswers(opts daemonOptions) *controlAnswers {
	return &controlAnswers{opts: opts, started: time.Now(), retry: make(chan struct{}, 1)}
}

// Status is the daemon's status.
func (s *controlAnswers) Status() control.StatusInfo {
	return statusOf(s.opts, s.started, s.daemon.Load())
}

// Sessions lists the sessions.
func (s *controlAnswers) Sessions() []control.SessionInfo {
	d := s.daemon.Load()
	if d == nil {
		return []control.SessionInfo{}
	}
	return d.sessionsInfo()
}

// LUNs lists the logical units.
func (s *controlAnswers) LUNs() ([]control.LUNInfo, error) {
	d := s.daemon.Load()
	if d == nil {
		return waitingLUNs(s.opts.configFile)
	}
	return d.lunsInfo(), nil
}

// Stats lists the counters, the reloads' and each initiator's included.
func (s *controlAnswers) Stats() []control.StatEntry {
	d := s.daemon.Load()
	if d == nil {
		return statEntries(srp.Stats{})
	}
	es := append(statEntries(d.target.Stats()),
		control.StatEntry{Name: "reloads_applied", Value: int64(d.reloadsApplied.Load())},
		control.StatEntry{Name: "reloads_failed", Value: int64(d.reloadsFailed.Load())})
	return append(es, d.initiatorStatEntries()...)
}

// ACLCheck says which ACL admits an initiator, from the configuration file while waiting.
func (s *controlAnswers) ACLCheck(initiator, source string) (*control.ACLCheckResult, error) {
	d := s.daemon.Load()
	if d != nil {
		return d.aclCheck(initiator, source)
	}
	res, err := ACLCheckFile(s.opts.configFile, initiator, source)
	if err != nil {
		return nil, err
	}
	res.From = "daemon"
	return res, nil
}

// Reload reloads or plans a reload. The outcome is in the result either way, errors
// included. systemd hears of it as of a SIGHUP reload.
func (s *controlAnswers) Reload(req control.ReloadRequest) (*control.ReloadResult, error) {
	d := s.daemon.Load()
	if d == nil {
		return waitingReload(s.opts, s.retry, req)
	}
	if !req.DryRun {
		notifyReloading(req.Log)
	}
	var res *control.ReloadResult
	var err error
	switch {
	case req.Config != nil:
		// A client's text: what it names is looked at only for root or the daemon's own
		// user (dryRun).
		res, err = d.dryRun(&candidate{name: req.ConfigName, text: req.Config}, req.Trusted, req.Closing)
	case req.DryRun:
		res, err = d.dryRun(nil, true, req.Closing)
	default:
		res, err = d.reloadReport(req.Closing)
		notifyReloaded(req.Log, err, d.statusLine())
	}
	if errors.Is(err, control.ErrClosing) {
		return nil, err
	}
	return res, nil
}

// LogLevel answers log-level: with level empty it says which level the daemon logs at;
// otherwise it logs at level from now on. Only the logger's level changes: sessions,
// channels and commands go on untouched. The change is logged with who asked, where it is
// seen: after the change when the new level shows info lines, before it otherwise.
func (s *controlAnswers) LogLevel(level string, log *zap.Logger) (*control.LogLevelResult, error) {
	return logLevel(s.opts.level, level, log)
}

// logLevel is LogLevel for the level al (nil: fixed).
func logLevel(al *zap.AtomicLevel, level string, log *zap.Logger) (*control.LogLevelResult, error) {
	if al == nil {
		if level == "" {
			// A logger without an adjustable level (tests): the lowest level it logs.
			return &control.LogLevelResult{Level: zapcore.LevelOf(log.Core()).String()}, nil
		}
		return nil, errors.New("this daemon's log level cannot be changed")
	}
	if level == "" {
		return &control.LogLevelResult{Level: al.Level().String()}, nil
	}
	to, err := control.ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	prev := al.Level()
	logChange := func() {
		log.Info("log level changed on the control socket", zap.Stringer("from", prev), zap.Stringer("to", to))
	}
	if to > zapcore.InfoLevel {
		logChange()
	}
	al.SetLevel(to)
	if to <= zapcore.InfoLevel {
		logChange()
	}
	return &control.LogLevelResult{Level: to.String(), Previous: prev.String()}, nil
}

// waitingReload answers srptarget reload (and validate --diff) while serve waits for a
// device: the configuration checked, every error in the answer, and, when it is valid, serve
// told to try to start now. Nothing is applied: what is checked is what a start would refuse.
func waitingReload(opts daemonOptions, retry chan<- struct{}, req control.ReloadRequest) (*control.ReloadResult, error) {
	res := &control.ReloadResult{DryRun: req.DryRun}
	var err error
	switch {
	case req.Config != nil && req.Trusted:
		_, err = config.Parse(req.ConfigName, req.Config)
	case req.Config != nil:
		// Another user's text: nothing it names is looked at (dryRun).
		res.PathsNotChecked = true
		_, err = config.ParseText(req.ConfigName, req.Config)
	case req.DryRun:
		var cfg *config.Config
		if cfg, err = config.LoadTrusted(opts.configFile); err == nil {
			err = preflight(opts, cfg, false)
		}
	default:
		req.Log.Info("reload requested on the control socket while waiting for an RDMA device")
		_, err = checkWhileWaiting(opts)
	}
	if err != nil {
		res.Errors = errorLines(asConfigErrors(err, opts.configFile))
		return res, nil
	}
	res.Waiting = true
	if !req.DryRun {
		select {
		case retry <- struct{}{}:
		default:
		}
	}
	return res, nil
}

// statusOf is the status of d, or while it is nil (not started) of the daemon that waits with
// opts since started.
func statusOf(opts daemonOptions, started time.Time, d *daemon) control.StatusInfo {
	st := control.StatusInfo{
		Version:       opts.build.Version,
		Build:         opts.build,
		PID:           os.Getpid(),
		Config:        opts.configFile,
		State:         "serving",
		Started:       started.UTC().Truncate(time.Second),
		UptimeSeconds: time.Since(started).Round(time.Second).Seconds(),
		Listeners:     []control.ListenerInfo{},
		Devices:       []string{},
	}
	if d == nil {
		st.State = statusWaitingDevice
		st.Devices, st.DevicesError = deviceNames(opts.devices)
		if cfg, err := config.LoadTrusted(opts.configFile); err == nil {
			b := resolveBackstoreIO(cfg)
			st.BackstoreIO, st.BackstoreIONote = b.engine.String(), b.note
			for _, lc := range cfg.Listeners {
				for _, a := range listenAddrsOf(lc) {
					st.Listeners = append(st.Listeners, control.ListenerInfo{Address: a.String(), State: waitingState(a)})
				}
			}
		}
		return st
	}
	if !d.serving() {
		st.State = statusWaitingDevice
	}
	d.mu.Lock()
	b := resolveBackstoreIO(d.cfg)
	st.BackstoreIO, st.BackstoreIONote = b.engine.String(), b.note
	for ap := range d.pending {
		st.Listeners = append(st.Listeners, control.ListenerInfo{Address: ap.String(), State: waitingState(ap)})
	}
	st.IDExt = fmt.Sprintf("%016x", d.ident.idExt)
	st.IOCGUID = fmt.Sprintf("%016x", d.ident.iocGUID)
	st.IdentityFrom = d.ident.from
	for ap, ls := range d.listeners {
		state := "listening"
		if ls.failed.Load() {
			state = "failed"
		}
		st.Listeners = append(st.Listeners, control.ListenerInfo{Address: ap.String(), State: state})
	}
	d.mu.Unlock()
	slices.SortFunc(st.Listeners, func(a, b control.ListenerInfo) int { return strings.Compare(a.Address, b.Address) })
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

// waitingLUNs are the LUNs of the configuration file while the daemon waits for a device:
// without their serial numbers, which come with the target identity.
func waitingLUNs(configFile string) ([]control.LUNInfo, error) {
	cfg, err := config.LoadTrusted(configFile)
	if err != nil {
		return nil, fmt.Errorf("waiting for an RDMA device, and the configuration has errors (srptarget validate): %w", err)
	}
	ls := make([]control.LUNInfo, 0, len(cfg.LUNs))
	for _, l := range cfg.LUNs {
		li := control.LUNInfo{LUN: *l.LUN, Backstore: string(l.Backstore), Path: l.Path, Size: uint64(l.Size),
			BlockSize: uint32(l.BlockSize), ReadOnly: l.ReadOnly, Serial: l.Serial, Sessions: []string{}, Initiators: []control.InitiatorIO{}}
		if l.RBD != nil {
			li.Path = l.RBD.ImageName()
		}
		ls = append(ls, li)
	}
	slices.SortFunc(ls, func(a, b control.LUNInfo) int { return a.LUN - b.LUN })
	return ls, nil
}
