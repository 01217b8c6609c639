package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

// DefaultShutdownTimeout bounds how long SIGTERM waits for outstanding commands before the
// channels are closed with commands still running.
const DefaultShutdownTimeout = 30 * time.Second

// daemonOptions are what the daemon needs from outside: the configuration file, a logger, and
// the RDMA seams (verbs in the binary, memfabric in tests).
type daemonOptions struct {
	configFile string
	log        *zap.Logger
	listen     ListenFunc
	listenIB   ListenIBFunc
	devices    DevicesFunc
	interfaces InterfacesFunc
	// memlock checks that the memory the engine registers can be pinned; nil skips the check
	// (memfabric pins nothing).
	memlock memlockFunc
	// sched gives the process the configuration's scheduling policy (setScheduling); nil
	// leaves it alone (tests).
	sched schedFunc
	// metrics gets the target and logical units of each configuration put in service, for
	// `serve --metrics`; nil without it.
	metrics *daemonCollector
	// level is the level log logs at, which srptarget log-level changes at run time; nil:
	// fixed (tests that do not change it).
	level *zap.AtomicLevel
	// build is what the daemon's binary is, for status, the log and srptarget_build_info.
	build control.BuildInfo
}

// daemon is `srptarget serve` without its signal handling: the SRP target built from a
// configuration, rebuilt in place by reload.
type daemon struct {
	opts daemonOptions
	log  *zap.Logger
	// Reloads applied and refused (SIGHUP or the control socket; dry runs not counted), for
	// srptarget stats.
	reloadsApplied, reloadsFailed atomic.Uint64
	closers                       closers
	serveLoops                    sync.WaitGroup // Serve loops

	// reloadMu serialises reloads, including what a reload does before it takes mu (reading
	// the file, opening backstores: prepare).
	reloadMu sync.Mutex
	mu       sync.Mutex // serialises start, reload and shutdown; guards what follows
	cfg      *config.Config
	ident    Identity
	target   *srp.Target
	// alua holds the target port groups every port of the target points at; a reload
	// changes its groups (SetGroups).
	alua *scsi.ALUA
	auth *aclAuthorizer
	// authNow is auth, for readers that must not wait for the daemon lock: the
	// per-initiator metrics and a forgotten session's labels (initiators.go).
	authNow atomic.Pointer[aclAuthorizer]
	// ioLabels are the per-initiator metrics' labels and what forgotten sessions counted.
	ioLabels  *initiatorLabels
	luns      map[int]*lunState
	stores    map[storeKey]*sharedStore
	listeners map[listenAddr]*listenerState
	// prs are the reservations of every logical unit identity seen, by state file path
	// (reservationsFor): they outlive the LogicalUnit objects that reloads replace.
	prs     map[string]*scsi.Reservations
	stopped bool
	// pending are the configured listeners whose address is on no RDMA device yet: the
	// daemon runs without them and retryPending listens when the address appears.
	pending map[listenAddr]bool
	// listening counts the listeners that listen, for srptarget_serving without d.mu.
	listening atomic.Int32
}

// lunState is one logical unit of the running configuration.
type lunState struct {
	num   int
	cfg   config.LUN
	key   luKey
	store *sharedStore
	lu    *scsi.LogicalUnit
}

// luKey is everything that makes a logical unit what it is. A reload keeps a LUN's
// LogicalUnit object, and with it unit attentions, mode pages and commands in progress, when
// its key is unchanged.
type luKey struct {
	store                             storeKey
	blockSize, physicalBlockSize      uint32
	vendor, product, revision, serial string
	readOnly, writeCache, thin, ssd   bool
	maxTransfer                       uint32
}

// listenerState is one listener.
type listenerState struct {
	addr   listenAddr // as configured
	ln     ib.Listener
	cancel context.CancelFunc
	failed atomic.Bool // Serve ended with a listener error: a reload listens again
}

func newDaemon(opts daemonOptions) *daemon {
	if opts.log == nil {
		opts.log = zap.NewNop()
	}
	return &daemon{
		opts:      opts,
		log:       opts.log,
		luns:      make(map[int]*lunState),
		stores:    make(map[storeKey]*sharedStore),
		listeners: make(map[listenAddr]*listenerState),
		ioLabels:  newInitiatorLabels(),
	}
}

// start loads the configuration, builds every logical unit, the LUN maps and the ACLs,
// creates the target and listens. On error nothing is left open.
func (d *daemon) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg, err := config.LoadTrusted(d.opts.configFile)
	if err != nil {
		return err
	}
	logWarnings(d.log, cfg)
	ident, err := ResolveIdentity(cfg.Target, d.opts.devices)
	if err != nil {
		return cfg.ErrorAt(config.At("target"), "%v", err)
	}
	if err := checkMemlock(d.opts.memlock, d.opts.devices, cfg, d.log); err != nil {
		return err
	}
	applyScheduling(d.opts.sched, cfg, d.log)
	d.alua, err = scsi.NewALUA(cfg.PortGroups())
	if err != nil {
		return cfg.ErrorAt(config.At("alua"), "%v", err)
	}
	d.target, err = newTarget(cfg, ident, d.alua, d.log, d.opts.metrics != nil, d.sessionForgotten)
	if err != nil {
		return err
	}
	d.ident = ident
	p, err := d.plan(cfg)
	if err != nil {
		return err
	}
	d.commit(p)
	d.logStartup()
	return nil
}

// newTarget makes the SRP target of cfg, its ports in the ALUA configuration a; measure turns
// the latency histograms on.
func newTarget(cfg *config.Config, ident Identity, a *scsi.ALUA, log *zap.Logger, measure bool, forgotten func(srp.SessionIOInfo)) (*srp.Target, error) {
	primary, more := targetPorts(cfg, ident, a)
	for i, p := range more {
		if p.ID == ident.portID() {
			return nil, cfg.ErrorAt(config.At("target", "ports", i, "id_ext"), "the same target port identifier as target's own port (%v): give it another id_ext", p.ID)
		}
	}
	t, err := srp.New(srp.Config{
		TargetPortID: ident.portID(),
		TargetPort:   primary,
		MorePorts:    more,
		Limits:       cfg.SRPLimits(),
		Logger:       log,
		// The latency histograms cost a clock read per completion batch: only when
		// --metrics exports them.
		MeasureLatency:   measure,
		SessionForgotten: forgotten,
	})
	if err != nil {
		return nil, cfg.ErrorAt(config.At("limits"), "%v", err)
	}
	return t, nil
}

// targetPorts makes the SCSI target ports of the configuration, all in the ALUA configuration
// a: target's own, and one per target.ports entry, named, as the first, by the SRP target port
// identifier.
func targetPorts(cfg *config.Config, ident Identity, a *scsi.ALUA) (*scsi.TargetPort, []srp.Port) {
	primary := &scsi.TargetPort{Name: ident.portID().String(), RelativeID: cfg.Target.RelativePortID, ALUA: a}
	var more []srp.Port
	for _, p := range cfg.Target.Ports {
		id := PortIdentity(p, ident).portID()
		more = append(more, srp.Port{ID: id, SCSI: &scsi.TargetPort{Name: id.String(), RelativeID: p.RelativePortID, ALUA: a}})
	}
	return primary, more
}

// applyPortGroups puts the configuration's target port groups in force. When a port's access
// state changed, every logical unit gets ASYMMETRIC ACCESS STATE CHANGED for every nexus
// (SPC-4 5.15.2.6): initiators then read REPORT TARGET PORT GROUPS again (Linux's
// scsi_dh_alua does on this unit attention) and move their I/O.
func (d *daemon) applyPortGroups(cfg *config.Config) {
	changed, err := d.alua.SetGroups(cfg.PortGroups())
	if err != nil {
		// Validation ran the same checks: not reached.
		d.log.Error("target port groups refused: the previous ones stay", zap.Error(err))
		return
	}
	if !changed {
		return
	}
	for _, st := range d.luns {
		st.lu.EstablishUA(nil, scsi.ReasonAsymmetricAccessStateChanged)
	}
	logPortGroups(d.log, d.alua)
	d.log.Info("asymmetric access states changed: ASYMMETRIC ACCESS STATE CHANGED pending for every initiator",
		zap.Int("luns", len(d.luns)))
}

// serve runs the engine's Serve loop for one listener until the listener is removed by a
// reload (its context is cancelled), the target shuts down, or the listener fails.
func (d *daemon) serve(ls *listenerState) {
	ctx, cancel := context.WithCancel(context.Background())
	ls.cancel = cancel
	d.serveLoops.Add(1)
	d.listening.Add(1)
	go func() {
		defer d.serveLoops.Done()
		defer d.listening.Add(-1)
		err := d.target.Serve(ctx, ls.ln)
		if !errors.Is(err, srp.ErrTargetClosed) && ctx.Err() == nil {
			ls.failed.Store(true)
			d.log.Error("listener failed: no more logins on this address until a reload (SIGHUP) listens again",
				zap.Stringer("address", ls.addr), zap.Error(err))
		}
		_ = ls.ln.Close()
	}()
}

// shutdown stops accepting logins, logs every channel out (SRP_T_LOGOUT) and lets outstanding
// commands finish until ctx ends, then flushes and closes every backstore.
func (d *daemon) shutdown(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return nil
	}
	d.stopped = true
	var errs []error
	if err := d.target.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown: %w", err))
	}
	for _, ls := range d.listeners {
		ls.cancel()
	}
	d.serveLoops.Wait()
	for _, st := range d.luns {
		// Each running unit holds one reference of its store: a failure here is a reference
		// dropped twice (ErrClosed), a bug that must not pass unseen.
		if err := st.lu.Close(); err != nil {
			d.log.Error("closing a logical unit at shutdown", zap.Int("lun", st.num), zap.Error(err))
			errs = append(errs, fmt.Errorf("lun %d: %w", st.num, err))
		}
	}
	d.luns = map[int]*lunState{}
	if d.opts.metrics != nil {
		d.opts.metrics.set(newMetricsView(d.target, d.luns, d.serving, d.initiatorSeries))
	}
	errs = append(errs, d.closers.wait()...)
	d.stores = map[storeKey]*sharedStore{}
	if len(errs) == 0 {
		d.log.Info("every backstore flushed and closed")
	}
	return errors.Join(errs...)
}

// logStartup logs what the target serves and how an initiator logs in.
func (d *daemon) logStartup() {
	startupLog{log: d.log, cfg: d.cfg, ident: d.ident, alua: d.alua, luns: d.luns, auth: d.auth,
		listeners: d.listeners, interfaces: d.opts.interfaces, devices: d.opts.devices}.write()
}
