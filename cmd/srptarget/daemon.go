package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
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
	listen     listenFunc
	listenIB   listenIBFunc
	devices    devicesFunc
	interfaces interfacesFunc
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
}

// daemon is `srptarget serve` without its signal handling: the SRP target built from a
// configuration, rebuilt in place by reload.
type daemon struct {
	opts daemonOptions
	log  *zap.Logger
	// Reloads applied and refused (SIGHUP or the control socket; dry runs not counted), for
	// srptarget stats.
	reloadsApplied, reloadsFailed atomic.Uint64
	closers                       sync.WaitGroup // backstores being flushed and closed
	serveLoops                    sync.WaitGroup // Serve loops

	closeErrMu sync.Mutex
	closeErrs  []error // flush and close failures, reported by shutdown

	// reloadMu serialises reloads, including what a reload does before it takes mu (reading
	// the file, opening backstores: prepare).
	reloadMu sync.Mutex
	mu       sync.Mutex // serialises start, reload and shutdown; guards what follows
	cfg      *config.Config
	ident    identity
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
	d.logWarnings(cfg)
	ident, err := resolveIdentity(cfg.Target, d.opts.devices)
	if err != nil {
		return cfg.ErrorAt(config.At("target"), "%v", err)
	}
	if err := d.checkMemlock(cfg); err != nil {
		return err
	}
	d.applyScheduling(cfg)
	d.alua, err = scsi.NewALUA(cfg.PortGroups())
	if err != nil {
		return cfg.ErrorAt(config.At("alua"), "%v", err)
	}
	primary, more := targetPorts(cfg, ident, d.alua)
	for i, p := range more {
		if p.ID == ident.portID() {
			return cfg.ErrorAt(config.At("target", "ports", i, "id_ext"), "the same target port identifier as target's own port (%v): give it another id_ext", p.ID)
		}
	}
	d.target, err = srp.New(srp.Config{
		TargetPortID: ident.portID(),
		TargetPort:   primary,
		MorePorts:    more,
		Limits:       cfg.SRPLimits(),
		Logger:       d.log,
		// The latency histograms cost a clock read per completion batch: only when
		// --metrics exports them.
		MeasureLatency:   d.opts.metrics != nil,
		SessionForgotten: d.sessionForgotten,
	})
	if err != nil {
		return cfg.ErrorAt(config.At("limits"), "%v", err)
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

// targetPorts makes the SCSI target ports of the configuration, all in the ALUA configuration
// a: target's own, and one per target.ports entry, named, as the first, by the SRP target port
// identifier.
func targetPorts(cfg *config.Config, ident identity, a *scsi.ALUA) (*scsi.TargetPort, []srp.Port) {
	primary := &scsi.TargetPort{Name: ident.portID().String(), RelativeID: cfg.Target.RelativePortID, ALUA: a}
	var more []srp.Port
	for _, p := range cfg.Target.Ports {
		id := portIdentity(p, ident).portID()
		more = append(more, srp.Port{ID: id, SCSI: &scsi.TargetPort{Name: id.String(), RelativeID: p.RelativePortID, ALUA: a}})
	}
	return primary, more
}

// portIdentity is the identifier of a target.ports entry (validated): its id_ext, and its
// ioc_guid or the target's.
func portIdentity(p config.Port, ident identity) identity {
	id := identity{iocGUID: ident.iocGUID, from: "configuration"}
	id.idExt, _ = config.ParseEUI64(p.IDExt)
	if p.IOCGUID != "" {
		id.iocGUID, _ = config.ParseEUI64(p.IOCGUID)
	}
	return id
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
	d.logPortGroups()
	d.log.Info("asymmetric access states changed: ASYMMETRIC ACCESS STATE CHANGED pending for every initiator",
		zap.Int("luns", len(d.luns)))
}

// logPortGroups logs the ALUA target port groups in force.
func (d *daemon) logPortGroups() {
	for _, g := range d.alua.Groups() {
		d.log.Info("target port group", zap.Uint16("group", g.ID), zap.Stringer("state", g.State),
			zap.Bool("preferred", g.Preferred), zap.Uint16s("relative_ports", g.Ports))
	}
}

// checkMemlock fails the start when the buffer pools and one initiator's channels could not
// be registered: better than a daemon that starts and then refuses every login. The limits
// cannot change on reload, so start-up is the one place to check.
func (d *daemon) checkMemlock(cfg *config.Config) error {
	if d.opts.memlock == nil {
		return nil
	}
	devices := 1
	if d.opts.devices != nil {
		if devs, err := d.opts.devices(); err == nil && len(devs) > 0 {
			devices = len(devs)
		}
	}
	need, pool, channel := memlockNeed(&cfg.Limits, devices)
	s, err := d.opts.memlock(need, pool, channel, devices, cfg.Limits.MaxChannels)
	if err != nil {
		return err
	}
	if s.raisedFrom != 0 {
		d.log.Info("raised the soft RLIMIT_MEMLOCK to the hard limit, for the memory registered for RDMA",
			zap.String("from", limitString(s.raisedFrom)), zap.String("to", limitString(s.cur)), zap.String("needed", humanBytes(need)))
	}
	d.log.Debug("locked memory", zap.String("needed", humanBytes(need)), zap.Int("devices", devices),
		zap.Bool("cap_ipc_lock", s.capIPCLock), zap.String("rlimit_memlock", limitString(s.cur)))
	return nil
}

// applyScheduling gives the daemon's threads the configured scheduling policy. It cannot
// change on reload, so start-up is the one place. A policy that cannot be applied (a seccomp
// filter, say) costs speed, not correctness: it is logged and the daemon goes on.
func (d *daemon) applyScheduling(cfg *config.Config) {
	if d.opts.sched == nil {
		return
	}
	policy := cfg.Limits.Scheduling
	if policy == config.SchedulingInherit {
		return
	}
	if err := d.opts.sched(policy); err != nil {
		d.log.Warn("could not set the threads' scheduling policy; running with the one inherited",
			zap.String("scheduling", policy), zap.Error(err),
			zap.String("hint", "limits.scheduling: inherit silences this; see configs/README.md"))
		return
	}
	d.log.Info("scheduling policy", zap.String("scheduling", policy), zap.Int("cpus", runtime.NumCPU()))
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

func (d *daemon) recordCloseErr(err error) {
	d.closeErrMu.Lock()
	d.closeErrs = append(d.closeErrs, err)
	d.closeErrMu.Unlock()
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
	d.closers.Wait()
	d.stores = map[storeKey]*sharedStore{}
	d.closeErrMu.Lock()
	errs = append(errs, d.closeErrs...)
	d.closeErrMu.Unlock()
	if len(errs) == 0 {
		d.log.Info("every backstore flushed and closed")
	}
	return errors.Join(errs...)
}

// logWarnings logs what validation found questionable, one line each.
func (d *daemon) logWarnings(cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		d.log.Warn("configuration warning", zap.String("warning", w.Error()), zap.String("file", w.File), zap.Int("line", w.Line))
	}
}

// logStartup logs what the target serves and how an initiator logs in.
func (d *daemon) logStartup() {
	d.log.Info("target identity", zap.String("id_ext", fmt.Sprintf("%016x", d.ident.idExt)),
		zap.String("ioc_guid", fmt.Sprintf("%016x", d.ident.iocGUID)), zap.String("from", d.ident.from),
		zap.Uint16("relative_port", d.cfg.Target.RelativePortID))
	for _, p := range d.cfg.Target.Ports {
		id := portIdentity(p, d.ident)
		d.log.Info("more target port", zap.String("id_ext", fmt.Sprintf("%016x", id.idExt)),
			zap.String("ioc_guid", fmt.Sprintf("%016x", id.iocGUID)), zap.Uint16("relative_port", p.RelativePortID))
	}
	d.logPortGroups()
	nums := make([]int, 0, len(d.luns))
	for n := range d.luns {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for _, n := range nums {
		d.logLUN(d.luns[n])
	}
	d.logACLs()
	addrs := make([]listenAddr, 0, len(d.listeners))
	for ap := range d.listeners {
		addrs = append(addrs, ap)
	}
	slices.SortFunc(addrs, listenAddr.compare)
	for _, ap := range addrs {
		d.log.Info("listening", zap.Stringer("address", ap))
	}
	for _, l := range addTargetLines(d.cfg, d.ident, d.opts.interfaces) {
		fields := []zap.Field{zap.String("add_target", l.command(d.ident))}
		if l.note != "" {
			fields = append(fields, zap.String("note", l.note))
		}
		d.log.Info("initiator login (on the initiator, as root)", fields...)
	}
	for _, l := range ibTargetLines(d.cfg, d.opts.devices) {
		d.log.Info("initiator login over native InfiniBand (on the initiator, as root)",
			zap.String("add_target", l.command(d.ident)), zap.String("note", l.note))
	}
}

func (d *daemon) logLUN(st *lunState) {
	fields := []zap.Field{
		zap.Int("lun", st.num),
		zap.String("backstore", string(st.cfg.Backstore)),
		zap.Stringer("size", config.Size(st.lu.Blocks()*uint64(st.lu.BlockSize()))),
		zap.Uint32("block_size", st.lu.BlockSize()),
	}
	if st.cfg.Path != "" {
		fields = append(fields, zap.String("path", st.cfg.Path))
	}
	if st.cfg.RBD != nil {
		fields = append(fields, zap.String("image", st.cfg.RBD.ImageName()))
	}
	fields = append(fields,
		zap.String("serial", st.key.serial),
		zap.Bool("read_only", st.key.readOnly),
		zap.Bool("write_cache", st.key.writeCache),
		zap.Bool("thin_provisioning", st.key.thin))
	d.log.Info("LUN", fields...)
}

func (d *daemon) logACLs() {
	if len(d.auth.acls) == 0 {
		d.log.Warn("no ACLs are configured: every login is refused")
	}
	seen := map[int]bool{}
	for _, e := range d.auth.acls {
		fields := []zap.Field{zap.String("acl", fmt.Sprintf("acls[%d]", e.index))}
		if e.cfg.Name != "" {
			fields = append(fields, zap.String("name", e.cfg.Name))
		}
		if len(e.cfg.Initiators) > 0 {
			fields = append(fields, zap.Strings("initiators", e.cfg.Initiators))
		}
		if len(e.cfg.Sources) > 0 {
			fields = append(fields, zap.Strings("sources", e.cfg.Sources))
		}
		fields = append(fields, zap.Ints("luns", e.cfg.LUNs), zap.Bool("read_only", e.cfg.ReadOnly))
		d.log.Info("ACL", fields...)
		for _, n := range e.cfg.LUNs {
			seen[n] = true
		}
	}
	for _, n := range d.auth.luns {
		if !seen[n] {
			d.log.Warn("LUN is in no ACL: no initiator sees it", zap.Int("lun", n))
		}
	}
}
