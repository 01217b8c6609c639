package daemon

// A configuration planned next to the running one (its logical units, backstores, ACLs and
// listeners), then committed or rolled back; the logical units a commit takes out of service.

import (
	"context"
	"fmt"
	"os"
	"slices"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

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
	keep         map[listenAddr]bool
	// pending are the listeners whose address is on no RDMA device yet: not an error, they
	// listen when it appears (daemon.retryPending).
	pending []listenAddr
	// dryRun plans from memory only, for a dry run that shows the plan, then rolls it back:
	// no listener opened (wouldListen lists them), no backstore (standIn), no state file.
	dryRun      bool
	wouldListen []listenAddr
	// pre are the backstores a reload opened before it took the daemon lock (prepare): the
	// plan takes them from there instead of opening them under the lock; fromPre names those
	// it took, which a rollback gives back rather than closing under the lock.
	pre     *prepared
	fromPre map[storeKey]bool
}

// plan builds cfg next to the running configuration. On error it has released everything it
// opened and returns every problem as config.Errors.
func (d *daemon) plan(cfg *config.Config) (*plan, error) { return d.planWith(cfg, false, nil) }

// planWith is plan, or with dryRun a plan for `reload --dry-run` only (see plan.dryRun); pre,
// if not nil, are backstores opened beforehand (prepare).
func (d *daemon) planWith(cfg *config.Config, dryRun bool, pre *prepared) (*plan, error) {
	p := &plan{
		dryRun:  dryRun,
		cfg:     cfg,
		luns:    make(map[int]*lunState),
		opened:  make(map[storeKey]*sharedStore),
		keep:    make(map[listenAddr]bool),
		pre:     pre,
		fromPre: make(map[storeKey]bool),
	}
	errs := d.checkSerials(cfg)
	if len(errs) > 0 {
		return nil, errs
	}
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
		switch {
		case p.dryRun:
			s, err = d.standIn(&l)
		case p.pre.has(sk):
			s, err = p.pre.take(sk)
			p.fromPre[sk] = err == nil
		default:
			s, err = openStore(&l, d.log, &d.closers.WaitGroup)
		}
		if err != nil {
			return openStoreError(cfg, i, err)
		}
		s.onErr = d.closers.record
		p.opened[sk] = s
		if !p.dryRun {
			if err := s.watchResize(); err != nil {
				d.log.Warn("watching the backstore for resizes failed: a resize needs a reload to be seen", zap.Int("lun", num), zap.Error(err))
			}
			if l.Backstore == "file" && !s.created && l.Size != 0 && s.Size() != int64(l.Size) {
				d.log.Warn("the file exists with another size: its own size is used",
					zap.Int("lun", num), zap.String("path", l.Path), zap.Stringer("file_size", config.Size(s.Size())), zap.Stringer("size", l.Size))
			}
		}
	}
	key := d.luKeyOf(cfg, &l, s)
	if prev := d.luns[num]; prev != nil && prev.key == key && prev.store == s {
		p.luns[num] = prev
		return nil
	}
	// A dry run's logical units never serve: they get reservations of their own, and
	// state_dir is not read under the daemon lock.
	prs := scsi.NewReservations(nil)
	switch {
	case p.dryRun:
	case l.Backstore == "rbd" && l.RBD != nil && l.RBD.PRStore == config.PRStoreRADOS:
		var err error
		if prs, err = s.sharedReservations(l.RBD, d.prMember(cfg)); err != nil {
			return cfg.ErrorAt(config.At("luns", i, "rbd", "pr_store"), "lun %d: the persistent reservations shared with the other gateways: %v", num, err)
		}
	default:
		var err error
		if prs, err = d.reservationsFor(cfg.StateDir, key.serial); err != nil {
			return cfg.ErrorAt(config.At("state_dir"), "lun %d: %v", num, err)
		}
	}
	lu, err := scsi.NewLogicalUnit(scsi.Config{
		Reservations:      prs,
		Backstore:         s.forLU(),
		Vendor:            key.vendor,
		Product:           key.product,
		Revision:          key.revision,
		Serial:            key.serial,
		ReadOnly:          key.readOnly,
		WriteCache:        key.writeCache,
		ThinProvisioning:  key.thin,
		NonRotational:     key.ssd,
		MaxTransferBytes:  key.maxTransfer,
		PhysicalBlockSize: key.physicalBlockSize,
		TaskManagement:    srp.TaskManagementFunctions,
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
		store:             s.key,
		blockSize:         s.LogicalBlockSize(),
		physicalBlockSize: uint32(l.PhysicalBlockSize),
		vendor:            l.Vendor,
		product:           l.Product,
		revision:          l.Revision,
		serial:            l.Serial,
		readOnly:          l.ReadOnly,
		writeCache:        l.WriteCache == nil || *l.WriteCache,
		thin:              s.Capabilities().Unmap,
		ssd:               l.Backstore == "memory" || l.Backstore == "null",
		maxTransfer:       uint32(cfg.Limits.MaxTransferSize),
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

// checkSerials refuses LUNs whose serials clash once the defaults are resolved: validation
// refused the clashes between serials the file sets, but a default (id_ext and the LUN
// number) can still be the serial, or have the WWID, that another LUN sets.
func (d *daemon) checkSerials(cfg *config.Config) config.Errors {
	serials := make([]string, len(cfg.LUNs))
	for i, l := range cfg.LUNs {
		serials[i] = l.Serial
		if serials[i] == "" {
			serials[i] = defaultSerial(d.ident, *l.LUN)
		}
	}
	var errs config.Errors
	for _, c := range config.SerialClashes(serials) {
		where, what := config.At("luns", c.I, "serial"), ""
		if cfg.LUNs[c.I].Serial == "" {
			where, what = config.At("luns", c.I), "its default serial (id_ext and the LUN number): "
		}
		other := fmt.Sprintf("luns[%d] (line %d)", c.J, cfg.ErrorAt(config.At("luns", c.J, "serial"), "").Line)
		if cfg.LUNs[c.J].Serial == "" {
			other = fmt.Sprintf("luns[%d] (line %d, its default: id_ext and the LUN number)", c.J, cfg.ErrorAt(config.At("luns", c.J), "").Line)
		}
		errs = append(errs, cfg.ErrorAt(where, "%s%s", what, c.Message(other)))
	}
	return errs
}

// defaultSerial is id_ext and the LUN number in hex: 20 hex digits, all of which go into the
// NAA designator of VPD page 0x83, so that the WWID Linux builds is the same after every
// restart and differs between LUNs and targets.
func defaultSerial(id Identity, lun int) string {
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
		for _, ap := range listenAddrsOf(lc) {
			errs = append(errs, d.planListener(p, i, ap)...)
		}
	}
	return errs
}

// planListener keeps or opens the listener ap of listeners[i].
func (d *daemon) planListener(p *plan, i int, ap listenAddr) config.Errors {
	if ls := d.listeners[ap]; ls != nil && !ls.failed.Load() {
		p.keep[ap] = true
		return nil
	}
	if p.dryRun && d.pending[ap] {
		p.pending = append(p.pending, ap)
		return nil
	}
	if p.dryRun {
		p.wouldListen = append(p.wouldListen, ap)
		return nil
	}
	ln, err := d.open(ap)
	if err != nil && isNoDevice(err) {
		if !d.pending[ap] {
			d.log.Warn("no RDMA device has the address of this listener yet: it listens when one does (checked when the RDMA devices or the host's addresses change)",
				zap.Stringer("address", ap), zap.Error(err))
		}
		p.pending = append(p.pending, ap)
		return nil
	}
	if err != nil {
		return config.Errors{p.cfg.ErrorAt(config.At("listeners", i), "listening on %v: %v", ap, err)}
	}
	// The buffer pool of the listener's device is registered now: a host that cannot pin it
	// fails here, with the fix, rather than refusing every login later.
	if err := d.target.Prepare(ln); err != nil {
		_ = ln.Close()
		return config.Errors{p.cfg.ErrorAt(config.At("listeners", i), "listening on %v: %v", ap, err)}
	}
	p.newListeners = append(p.newListeners, &listenerState{addr: ap, ln: ln})
	return nil
}

// rollback releases what a failed plan opened: its logical units never served a command. The
// backstores it took from pre go back there, for the caller to close without the daemon lock.
func (p *plan) rollback() {
	for _, st := range p.created {
		st.store.refs.Add(-1)
	}
	for k, s := range p.opened {
		switch {
		case s.refs.Load() != 0:
		case p.fromPre[k]:
			p.pre.giveBack(k, s)
		default:
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
	d.authNow.Store(p.auth)
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
	d.pending = make(map[listenAddr]bool, len(p.pending))
	for _, ap := range p.pending {
		d.pending[ap] = true
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
		d.opts.metrics.set(newMetricsView(d.target, d.luns, d.serving, d.initiatorSeries))
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

// pathExists reports whether something (a link included) is at path.
func pathExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
