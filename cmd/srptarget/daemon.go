package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
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
	devices    devicesFunc
	interfaces interfacesFunc
	// memlock checks that the memory the engine registers can be pinned; nil skips the check
	// (memfabric pins nothing).
	memlock memlockFunc
	// metrics gets the target and logical units of each configuration put in service, for
	// `serve --metrics`; nil without it.
	metrics *daemonCollector
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
	serving                       sync.WaitGroup // Serve loops

	closeErrMu sync.Mutex
	closeErrs  []error // flush and close failures, reported by shutdown

	mu     sync.Mutex // serialises start, reload and shutdown; guards what follows
	cfg    *config.Config
	ident  identity
	target *srp.Target
	// alua holds the target port groups every port of the target points at; a reload
	// changes its groups (SetGroups).
	alua      *scsi.ALUA
	auth      *aclAuthorizer
	luns      map[int]*lunState
	stores    map[storeKey]*sharedStore
	listeners map[netip.AddrPort]*listenerState
	// prs are the reservations of every logical unit identity seen, by state file path
	// (reservationsFor): they outlive the LogicalUnit objects that reloads replace.
	prs     map[string]*scsi.Reservations
	stopped bool
	// noDevice: a listener could not listen because no RDMA device has its address (yet);
	// serve waits for one instead of failing (startWhenDevice).
	noDevice bool
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
	blockSize                         uint32
	vendor, product, revision, serial string
	readOnly, writeCache, thin, ssd   bool
	maxTransfer                       uint32
}

// listenerState is one listening address.
type listenerState struct {
	addr   netip.AddrPort // as configured
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
		listeners: make(map[netip.AddrPort]*listenerState),
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
		MeasureLatency: d.opts.metrics != nil,
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

// plan is a configuration built next to the running one: its logical units (new ones and the
// running ones it keeps), the backstores it had to open, its ACLs and the listeners it had to
// open. Nothing of it is visible to initiators until commit.
type plan struct {
	cfg          *config.Config
	luns         map[int]*lunState
	created      []*lunState
	opened       map[storeKey]*sharedStore
	auth         *aclAuthorizer
	newListeners []*listenerState
	keep         map[netip.AddrPort]bool
	// dryRun plans without opening new listeners (wouldListen lists them) or creating files:
	// `srptarget reload --dry-run` shows the plan, then rolls it back.
	dryRun      bool
	wouldListen []netip.AddrPort
}

// plan builds cfg next to the running configuration. On error it has released everything it
// opened and returns every problem as config.Errors.
func (d *daemon) plan(cfg *config.Config) (*plan, error) { return d.planWith(cfg, false) }

// planWith is plan, or with dryRun a plan for `reload --dry-run` only (see plan.dryRun).
func (d *daemon) planWith(cfg *config.Config, dryRun bool) (*plan, error) {
	p := &plan{
		dryRun: dryRun,
		cfg:    cfg,
		luns:   make(map[int]*lunState),
		opened: make(map[storeKey]*sharedStore),
		keep:   make(map[netip.AddrPort]bool),
	}
	var errs config.Errors
	for i := range cfg.LUNs {
		if err := d.planLUN(p, i); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		var err *config.Error
		if p.auth, err = buildAuthorizer(cfg, p.luns); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, d.planListeners(p)...)
	}
	if len(errs) > 0 {
		p.rollback()
		return nil, errs
	}
	return p, nil
}

// planLUN finds or makes the logical unit of cfg.LUNs[i].
func (d *daemon) planLUN(p *plan, i int) *config.Error {
	cfg := p.cfg
	l := cfg.LUNs[i]
	num := *l.LUN
	sk := storeKeyOf(&l)
	s := d.stores[sk]
	if s == nil {
		s = p.opened[sk]
	}
	if s == nil {
		if l.Backstore == "block" {
			for k := range d.stores {
				if k.kind == "block" && k.path == sk.path {
					return cfg.ErrorAt(config.At("luns", i, "read_only"), "%s is open with other settings and is claimed exclusively: change it in two reloads (remove the LUN, then add it back) or restart", l.Path)
				}
			}
		}
		var err error
		if p.dryRun && l.Backstore == "file" && l.Create && !pathExists(l.Path) {
			// A dry run creates no file: a null backstore of the size it would have stands in.
			s, err = openStore(&config.LUN{LUN: l.LUN, Backstore: "null", Size: l.Size, BlockSize: l.BlockSize}, d.log, &d.closers)
			if err == nil {
				s.key = sk
			}
		} else {
			s, err = openStore(&l, d.log, &d.closers)
		}
		var shared *backstore.SharedFileError
		switch {
		case errors.As(err, &shared):
			return cfg.ErrorAt(config.At("luns", i, "path"), "opening the backstore: %v (allow_shared_file: true on this LUN)", err)
		case errors.Is(err, backstore.ErrSymlink):
			return cfg.ErrorAt(config.At("luns", i, "path"), "opening the backstore: %v", err)
		case err != nil:
			return cfg.ErrorAt(config.At("luns", i), "opening the backstore: %v", err)
		}
		s.onErr = d.recordCloseErr
		p.opened[sk] = s
		if err := s.watchResize(); err != nil {
			d.log.Warn("watching the backstore for resizes failed: a resize needs a reload to be seen", zap.Int("lun", num), zap.Error(err))
		}
		if l.Backstore == "file" && !s.created && l.Size != 0 && s.Size() != int64(l.Size) {
			d.log.Warn("the file exists with another size: its own size is used",
				zap.Int("lun", num), zap.String("path", l.Path), zap.Stringer("file_size", config.Size(s.Size())), zap.Stringer("size", l.Size))
		}
	}
	key := d.luKeyOf(cfg, &l, s)
	if prev := d.luns[num]; prev != nil && prev.key == key && prev.store == s {
		p.luns[num] = prev
		return nil
	}
	prs, err := d.reservationsFor(cfg.StateDir, key.serial)
	if err != nil {
		return cfg.ErrorAt(config.At("state_dir"), "lun %d: %v", num, err)
	}
	lu, err := scsi.NewLogicalUnit(scsi.Config{
		Reservations:     prs,
		Backstore:        s,
		Vendor:           key.vendor,
		Product:          key.product,
		Revision:         key.revision,
		Serial:           key.serial,
		ReadOnly:         key.readOnly,
		WriteCache:       key.writeCache,
		ThinProvisioning: key.thin,
		NonRotational:    key.ssd,
		MaxTransferBytes: key.maxTransfer,
		TaskManagement:   srp.TaskManagementFunctions,
	})
	if err != nil {
		where := config.At("luns", i)
		if l.ThinProvisioning != nil && *l.ThinProvisioning && !s.Capabilities().Unmap {
			where = config.At("luns", i, "thin_provisioning")
		}
		return cfg.ErrorAt(where, "%v", err)
	}
	s.acquire()
	s.addLU(lu)
	st := &lunState{num: num, cfg: l, key: key, store: s, lu: lu}
	p.luns[num] = st
	p.created = append(p.created, st)
	return nil
}

// luKeyOf resolves the defaults of a LUN: the serial from the target identity and the LUN
// number (stable across restarts, unique per target), thin provisioning where the backstore can
// unmap, the write cache on, solid state for RAM.
func (d *daemon) luKeyOf(cfg *config.Config, l *config.LUN, s *sharedStore) luKey {
	k := luKey{
		store:       s.key,
		blockSize:   s.LogicalBlockSize(),
		vendor:      l.Vendor,
		product:     l.Product,
		revision:    l.Revision,
		serial:      l.Serial,
		readOnly:    l.ReadOnly,
		writeCache:  l.WriteCache == nil || *l.WriteCache,
		thin:        s.Capabilities().Unmap,
		ssd:         l.Backstore == "memory" || l.Backstore == "null",
		maxTransfer: uint32(cfg.Limits.MaxTransferSize),
	}
	if l.ThinProvisioning != nil {
		k.thin = *l.ThinProvisioning
	}
	if k.vendor == "" {
		k.vendor = scsi.DefaultVendor
	}
	if k.product == "" {
		k.product = scsi.DefaultProduct
	}
	if k.revision == "" {
		k.revision = scsi.DefaultRevision
	}
	if k.serial == "" {
		k.serial = defaultSerial(d.ident, *l.LUN)
	}
	return k
}

// defaultSerial is id_ext and the LUN number in hex: 20 hex digits, all of which go into the
// NAA designator of VPD page 0x83, so that the WWID Linux builds is the same after every
// restart and differs between LUNs and targets.
func defaultSerial(id identity, lun int) string {
	return fmt.Sprintf("%016x%04x", id.idExt, lun)
}

// buildAuthorizer makes a LUN map per ACL.
func buildAuthorizer(cfg *config.Config, luns map[int]*lunState) (*aclAuthorizer, *config.Error) {
	a := &aclAuthorizer{}
	for n := range luns {
		a.luns = append(a.luns, n)
	}
	slices.Sort(a.luns)
	for i, c := range cfg.ACLs {
		e, cerr := newACLEntry(cfg, i)
		if cerr != nil {
			return nil, cerr
		}
		maps := make([]scsi.Mapping, 0, len(c.LUNs))
		for _, n := range c.LUNs {
			maps = append(maps, scsi.Mapping{LUN: uint16(n), LU: luns[n].lu, ReadOnly: c.ReadOnly})
		}
		m, err := scsi.NewLUNMap(maps)
		if err != nil {
			return nil, cfg.ErrorAt(config.At("acls", i, "luns"), "%v", err)
		}
		e.lunMap = m
		a.acls = append(a.acls, e)
	}
	return a, nil
}

// planListeners keeps the running listeners the configuration still has and opens the others.
func (d *daemon) planListeners(p *plan) config.Errors {
	var errs config.Errors
	for i, lc := range p.cfg.Listeners {
		addr, _ := config.ParseListenAddress(lc.Address)
		ap := netip.AddrPortFrom(addr, lc.Port)
		if ls := d.listeners[ap]; ls != nil && !ls.failed.Load() {
			p.keep[ap] = true
			continue
		}
		if p.dryRun {
			p.wouldListen = append(p.wouldListen, ap)
			continue
		}
		if d.opts.listen == nil {
			errs = append(errs, p.cfg.ErrorAt(config.At("listeners", i), "listening on %v: %v", ap, errNoRDMA))
			continue
		}
		ln, err := d.opts.listen(ap)
		if err != nil {
			d.noDevice = d.noDevice || isNoDevice(err)
			errs = append(errs, p.cfg.ErrorAt(config.At("listeners", i), "listening on %v: %v", ap, err))
			continue
		}
		// The buffer pool of the listener's device is registered now: a host that cannot pin
		// it fails here, with the fix, rather than refusing every login later.
		if err := d.target.Prepare(ln); err != nil {
			_ = ln.Close()
			errs = append(errs, p.cfg.ErrorAt(config.At("listeners", i), "listening on %v: %v", ap, err))
			continue
		}
		p.newListeners = append(p.newListeners, &listenerState{addr: ap, ln: ln})
	}
	return errs
}

// rollback releases what a failed plan opened: its logical units never served a command.
func (p *plan) rollback() {
	for _, st := range p.created {
		st.store.refs.Add(-1)
	}
	for _, s := range p.opened {
		if s.refs.Load() == 0 {
			s.discard()
		}
	}
	for _, ls := range p.newListeners {
		_ = ls.ln.Close()
	}
}

// commit makes p the running configuration: the new ACLs and LUN maps go to the engine in one
// SetAuthorizer (sessions whose map changed get REPORTED LUNS DATA HAS CHANGED), new listeners
// start serving, removed ones stop, and logical units no longer used are closed.
func (d *daemon) commit(p *plan) {
	old := d.luns
	d.cfg, d.luns, d.auth = p.cfg, p.luns, p.auth
	for k, s := range p.opened {
		d.stores[k] = s
	}
	d.target.SetAuthorizer(p.auth)
	for ap, ls := range d.listeners {
		if !p.keep[ap] {
			ls.cancel()
			delete(d.listeners, ap)
			if !ls.failed.Load() {
				d.log.Info("stopped listening", zap.Stringer("address", ap))
			}
		}
	}
	for _, ls := range p.newListeners {
		d.listeners[ls.addr] = ls
		d.serve(ls)
	}
	for num, st := range old {
		if p.luns[num] != st {
			d.retire(st)
		}
	}
	// d.stores keeps the backstores the running logical units use, and only those: a store
	// left to a retiring unit is closed when the unit's commands are done, and must not be
	// found by a later reload meanwhile.
	inUse := make(map[*sharedStore]bool, len(d.luns))
	for _, st := range d.luns {
		inUse[st.store] = true
	}
	for k, s := range d.stores {
		if !inUse[s] {
			delete(d.stores, k)
		}
	}
	if d.opts.metrics != nil {
		d.opts.metrics.set(newMetricsView(d.target, d.luns))
	}
}

// retireTimeout bounds how long a logical unit removed or replaced by a reload waits for the
// commands in progress on it before its backstore is closed under them.
const retireTimeout = srp.DefaultDrainTimeout

// retire takes a logical unit that a reload removed or replaced out of service. The new LUN
// maps are published already, so no new command reaches it; the commands that hold it (from
// before the reload, some still moving their data) run to the end, then its backstore
// reference is dropped (the last one flushes and closes it). Closing at once would fail them
// with LOGICAL UNIT COMMUNICATION FAILURE, an I/O error for the application. The wait is on
// its own goroutine, tracked by closers, so that a reload never waits for it.
func (d *daemon) retire(st *lunState) {
	d.closers.Add(1)
	go func() {
		defer d.closers.Done()
		ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
		defer cancel()
		holds := st.lu.Holds()
		drained, err := st.lu.Retire(ctx)
		switch {
		case err != nil:
			d.log.Warn("closing a retired logical unit", zap.Int("lun", st.num), zap.Error(err))
		case !drained:
			d.log.Warn("retired logical unit closed with commands still in progress: those that reach its backstore now fail with LOGICAL UNIT COMMUNICATION FAILURE",
				zap.Int("lun", st.num), zap.Duration("waited", retireTimeout), zap.Int64("commands", st.lu.Holds()))
		case holds > 0:
			d.log.Info("retired logical unit closed after its commands in progress finished",
				zap.Int("lun", st.num), zap.Int64("commands", holds))
		}
	}()
}

// serve runs the engine's Serve loop for one listener until the listener is removed by a
// reload (its context is cancelled), the target shuts down, or the listener fails.
func (d *daemon) serve(ls *listenerState) {
	ctx, cancel := context.WithCancel(context.Background())
	ls.cancel = cancel
	d.serving.Add(1)
	go func() {
		defer d.serving.Done()
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

// errReloadStopped is returned by reload after shutdown began.
var errReloadStopped = errors.New("the target is shutting down")

// reload applies the configuration file again. Either all of it takes effect or none: on any
// error the running configuration stays as it was, and every error is logged with its file and
// line.
func (d *daemon) reload() error {
	_, err := d.reloadReport(false)
	return err
}

// reloadReport is reload for the control socket: it also says what changed (or, with dryRun,
// what would change: the plan is rolled back and nothing is applied) and, when the reload is
// refused, every error as the log has it.
func (d *daemon) reloadReport(dryRun bool) (*reloadResult, error) {
	return d.reloadReportOf(&reloadResult{DryRun: dryRun})
}

// reloadReportText plans, without applying anything, the configuration text data (named
// name in messages) in place of the daemon's file: validate --diff.
func (d *daemon) reloadReportText(name string, data []byte) (*reloadResult, error) {
	if name == "" {
		name = "configuration"
	}
	return d.reloadReportOf(&reloadResult{DryRun: true, candidate: data, candidateName: name})
}

func (d *daemon) reloadReportOf(res *reloadResult) (*reloadResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dryRun := res.DryRun
	if d.stopped {
		res.Errors = []string{errReloadStopped.Error()}
		return res, errReloadStopped
	}
	if dryRun {
		d.log.Info("planning a reload without applying it (dry run)", zap.String("config", d.opts.configFile))
	} else {
		d.log.Info("reloading the configuration", zap.String("config", d.opts.configFile))
	}
	err := d.reloadLocked(res)
	if err != nil {
		var errs config.Errors
		var one *config.Error
		switch {
		case errors.As(err, &errs):
		case errors.As(err, &one):
			errs = config.Errors{one}
		default:
			errs = config.Errors{{File: d.opts.configFile, Msg: err.Error()}}
		}
		res.Errors = res.Errors[:0]
		for _, e := range errs {
			res.Errors = append(res.Errors, e.Error())
			if !dryRun {
				d.log.Error("configuration error", zap.String("error", e.Error()), zap.String("file", e.File), zap.Int("line", e.Line))
			}
		}
		if !dryRun {
			d.reloadsFailed.Add(1)
			d.log.Error("reload failed: the running configuration is unchanged", zap.Int("errors", len(errs)))
		}
		return res, err
	}
	res.Applied = !dryRun
	if !dryRun {
		d.reloadsApplied.Add(1)
	}
	return res, nil
}

// reloadLocked loads, plans and, unless res.DryRun, commits the configuration file; res gets
// the changes.
func (d *daemon) reloadLocked(res *reloadResult) error {
	var cfg *config.Config
	var err error
	if res.candidate != nil {
		cfg, err = config.Parse(res.candidateName, res.candidate)
	} else {
		cfg, err = config.LoadTrusted(d.opts.configFile)
	}
	if err != nil {
		return err
	}
	if !res.DryRun {
		d.logWarnings(cfg)
	}
	for _, w := range cfg.Warnings() {
		res.Warnings = append(res.Warnings, w.Error())
	}
	if errs := d.checkImmutable(cfg); len(errs) > 0 {
		return errs
	}
	oldLUNs, oldListeners := d.luns, make(map[netip.AddrPort]bool)
	for ap, ls := range d.listeners {
		oldListeners[ap] = !ls.failed.Load()
	}
	p, err := d.planWith(cfg, res.DryRun)
	if err != nil {
		return err
	}
	added, changed, removed, kept := []int{}, []int{}, []int{}, []int{}
	for num, st := range p.luns {
		switch prev := oldLUNs[num]; {
		case prev == nil:
			added = append(added, num)
		case prev != st:
			changed = append(changed, num)
		default:
			kept = append(kept, num)
		}
	}
	for num := range oldLUNs {
		if p.luns[num] == nil {
			removed = append(removed, num)
		}
	}
	for _, s := range [][]int{added, changed, removed, kept} {
		slices.Sort(s)
	}
	res.LUNsAdded, res.LUNsChanged, res.LUNsRemoved, res.LUNsUnchanged = added, changed, removed, kept
	d.describePlan(p, res)
	if res.DryRun {
		p.rollback()
		return nil
	}
	d.commit(p)
	d.applyPortGroups(cfg)
	for _, num := range kept {
		st := d.luns[num]
		if st.cfg.Backstore != "file" && st.cfg.Backstore != "block" && st.cfg.Backstore != "rbd" {
			continue
		}
		if resized, err := st.lu.RefreshCapacity(); err != nil {
			d.log.Warn("re-reading the capacity failed", zap.Int("lun", num), zap.Error(err))
		} else if resized {
			d.log.Info("capacity changed: CAPACITY DATA HAS CHANGED pending for every initiator",
				zap.Int("lun", num), zap.Stringer("size", config.Size(st.lu.Blocks()*uint64(st.lu.BlockSize()))))
		}
	}
	for _, num := range append(append([]int(nil), added...), changed...) {
		d.logLUN(d.luns[num])
	}
	for _, ls := range p.newListeners {
		d.log.Info("listening", zap.Stringer("address", ls.addr))
	}
	d.logACLs()
	d.log.Info("configuration reloaded",
		zap.Ints("luns_added", added), zap.Ints("luns_changed", changed),
		zap.Ints("luns_removed", removed), zap.Ints("luns_unchanged", kept),
		zap.Int("acls", len(cfg.ACLs)), zap.Int("listeners", len(d.listeners)))
	return nil
}

// checkImmutable reports the changes a reload cannot make: the engine's target port identifier
// and limits are fixed when it is created.
func (d *daemon) checkImmutable(cfg *config.Config) config.Errors {
	var errs config.Errors
	ident := d.ident
	if cfg.Target.Configured() || d.ident.from == "configuration" {
		var err error
		ident, err = resolveIdentity(cfg.Target, d.opts.devices)
		if err != nil {
			return config.Errors{cfg.ErrorAt(config.At("target"), "%v", err)}
		}
	}
	if ident.idExt != d.ident.idExt || ident.iocGUID != d.ident.iocGUID {
		errs = append(errs, cfg.ErrorAt(config.At("target"), "the target identity cannot change while running (id_ext=%016x ioc_guid=%016x, from the %s): restart srptarget to change it",
			d.ident.idExt, d.ident.iocGUID, d.ident.from))
	} else {
		// The target ports are the engine's too; their groups and states may change.
		type port struct {
			id  iu.PortID
			rel uint16
		}
		ports := func(c *config.Config) []port {
			ps := []port{{ident.portID(), c.Target.RelativePortID}}
			for _, p := range c.Target.Ports {
				ps = append(ps, port{portIdentity(p, ident).portID(), p.RelativePortID})
			}
			return ps
		}
		if !slices.Equal(ports(d.cfg), ports(cfg)) {
			errs = append(errs, cfg.ErrorAt(config.At("target"), "target ports cannot change while running (relative_port_id and ports): restart srptarget to change them; alua.groups can change"))
		}
	}
	o, n := &d.cfg.Limits, &cfg.Limits
	oe, ne := d.cfg.SRPLimits(), cfg.SRPLimits()
	for _, c := range []struct {
		key      string
		old, new any
	}{
		{"max_it_iu_len", o.MaxIUSize, n.MaxIUSize},
		{"credits", o.Credits, n.Credits},
		{"max_channels", o.MaxChannels, n.MaxChannels},
		{"max_transfer_size", o.MaxTransferSize, n.MaxTransferSize},
		{"send_queue_depth", o.SendQueueDepth, n.SendQueueDepth},
		{"buffer_pool_size", o.BufferPoolSize, n.BufferPoolSize},
		{"immediate_data", *o.ImmediateData, *n.ImmediateData},
		{"completion", oe.Completion, ne.Completion},
		{"poll_window", oe.PollWindow, ne.PollWindow},
		{"rdma_timeout", oe.RDMATimeout, ne.RDMATimeout},
		{"max_channel_buffer", oe.MaxChannelBuffer, ne.MaxChannelBuffer},
		{"max_sessions", o.MaxSessions, n.MaxSessions},
		{"max_channels_total", o.MaxChannelsTotal, n.MaxChannelsTotal},
		{"max_logins_in_progress", o.MaxLoginsInProgress, n.MaxLoginsInProgress},
	} {
		if c.old != c.new {
			errs = append(errs, cfg.ErrorAt(config.At("limits", c.key), "limits cannot change while running (running with %v): restart srptarget to change them", c.old))
		}
	}
	return errs
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
	d.serving.Wait()
	for _, st := range d.luns {
		_ = st.lu.Close()
	}
	d.luns = map[int]*lunState{}
	if d.opts.metrics != nil {
		d.opts.metrics.set(newMetricsView(d.target, d.luns))
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
	addrs := make([]netip.AddrPort, 0, len(d.listeners))
	for ap := range d.listeners {
		addrs = append(addrs, ap)
	}
	slices.SortFunc(addrs, func(a, b netip.AddrPort) int { return a.Compare(b) })
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
