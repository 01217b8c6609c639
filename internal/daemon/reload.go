package daemon

// Reload: the configuration file applied again in place, all of it or none, and the report
// of what it changes (or, as a dry run, would change) for the control socket.

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// errReloadStopped is returned by reload after shutdown began.
var errReloadStopped = errors.New("the target is shutting down")

// reloadStop applies the configuration file again. Either all of it takes effect or none: on
// any error the running configuration stays as it was, and every error is logged with its file
// and line. It gives up (errReloadStopped) when stop closes while it still opens backstores.
func (d *daemon) reloadStop(stop <-chan struct{}) error {
	_, err := d.reloadReport(stop)
	return err
}

// reloadReport is reload for the control socket: it also says what changed and, when the
// reload is refused, every error as the log has it.
//
// What may wait is done before the daemon lock is taken, so that status, sessions and the
// other control commands, and a shutdown, answer meanwhile: reading the file and opening the
// backstores the running configuration does not have (an RBD image whose monitors do not
// answer waits up to rados_mount_timeout). Reloads wait for each other (reloadMu).
//
// A close of stop (the daemon shuts down) ends the wait for the backstores: the reload is
// given up, and what was opened for it is closed once opened.
func (d *daemon) reloadReport(stop <-chan struct{}) (*control.ReloadResult, error) {
	res := &control.ReloadResult{}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	d.log.Info("reloading the configuration", zap.String("config", d.opts.configFile))
	cfg, err := config.LoadTrusted(d.opts.configFile)
	var pre *prepared
	if err == nil {
		if pre, err = d.prepareStop(cfg, stop); err != nil {
			res.Errors = []string{err.Error()}
			return res, err
		}
		defer pre.close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		res.Errors = []string{errReloadStopped.Error()}
		return res, errReloadStopped
	}
	if err == nil {
		err = d.reloadLocked(res, cfg, pre)
	}
	if err != nil {
		errs := asConfigErrors(err, d.opts.configFile)
		res.Errors = errorLines(errs)
		for _, e := range errs {
			d.log.Error("configuration error", zap.String("error", e.Error()), zap.String("file", e.File), zap.Int("line", e.Line))
		}
		d.reloadsFailed.Add(1)
		d.log.Error("reload failed: the running configuration is unchanged", zap.Int("errors", len(errs)))
		return res, err
	}
	res.Applied = true
	d.reloadsApplied.Add(1)
	return res, nil
}

// asConfigErrors is err as a list of configuration errors; one that is none is about file.
func asConfigErrors(err error, file string) config.Errors {
	if errs := config.AsErrors(err); errs != nil {
		return errs
	}
	return config.Errors{{File: file, Msg: err.Error()}}
}

// errorLines are errs as the log and the answers print them.
func errorLines(errs config.Errors) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

// reloadLocked plans and commits cfg, read from the configuration file, with the backstores
// opened beforehand (pre); res gets the changes.
func (d *daemon) reloadLocked(res *control.ReloadResult, cfg *config.Config, pre *prepared) error {
	logWarnings(d.log, cfg)
	p, err := d.planChanges(cfg, res, false, pre)
	if err != nil {
		return err
	}
	d.commit(p)
	d.applyPortGroups(cfg)
	for _, num := range res.LUNsUnchanged {
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
	for _, num := range append(append([]int(nil), res.LUNsAdded...), res.LUNsChanged...) {
		logLUN(d.log, d.luns[num])
	}
	for _, ls := range p.newListeners {
		d.log.Info("listening", zap.Stringer("address", ls.addr))
	}
	logACLs(d.log, d.auth)
	d.log.Info("configuration reloaded",
		zap.Ints("luns_added", res.LUNsAdded), zap.Ints("luns_changed", res.LUNsChanged),
		zap.Ints("luns_removed", res.LUNsRemoved), zap.Ints("luns_unchanged", res.LUNsUnchanged),
		zap.Int("acls", len(cfg.ACLs)), zap.Int("listeners", len(d.listeners)))
	return nil
}

// planChanges plans cfg next to the running configuration (planWith) and fills res with what
// committing the plan would change. The caller commits the plan or rolls it back.
func (d *daemon) planChanges(cfg *config.Config, res *control.ReloadResult, dryRun bool, pre *prepared) (*plan, error) {
	for _, w := range cfg.Warnings() {
		res.Warnings = append(res.Warnings, w.Error())
	}
	if errs := d.checkImmutable(cfg); len(errs) > 0 {
		return nil, errs
	}
	p, err := d.planWith(cfg, dryRun, pre)
	if err != nil {
		return nil, err
	}
	added, changed, removed, kept := []int{}, []int{}, []int{}, []int{}
	for num, st := range p.luns {
		switch prev := d.luns[num]; {
		case prev == nil:
			added = append(added, num)
		case prev != st:
			changed = append(changed, num)
		default:
			kept = append(kept, num)
		}
	}
	for num := range d.luns {
		if p.luns[num] == nil {
			removed = append(removed, num)
		}
	}
	for _, s := range [][]int{added, changed, removed, kept} {
		slices.Sort(s)
	}
	res.LUNsAdded, res.LUNsChanged, res.LUNsRemoved, res.LUNsUnchanged = added, changed, removed, kept
	d.describePlan(p, res)
	d.describeSettings(p, res)
	return p, nil
}

// checkImmutable reports the changes a reload cannot make: the engine's target port identifier
// and limits are fixed when it is created.
func (d *daemon) checkImmutable(cfg *config.Config) config.Errors {
	var errs config.Errors
	ident := d.ident
	if cfg.Target.Configured() || d.ident.from == "configuration" {
		var err error
		ident, err = ResolveIdentity(cfg.Target, d.opts.devices)
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
				ps = append(ps, port{PortIdentity(p, ident).portID(), p.RelativePortID})
			}
			return ps
		}
		if !slices.Equal(ports(d.cfg), ports(cfg)) {
			errs = append(errs, cfg.ErrorAt(config.At("target"), "target ports cannot change while running (relative_port_id and ports): restart srptarget to change them; alua.groups can change"))
		}
	}
	for _, c := range config.LimitChanges(&d.cfg.Limits, &cfg.Limits) {
		errs = append(errs, cfg.ErrorAt(config.At("limits", c.Key), "limits cannot change while running (running with %v): restart srptarget to change them", c.Old))
	}
	return errs
}

// describePlan fills in what committing p would change besides the LUNs: listeners, and the
// logged-in initiators that lose or gain LUNs or are disconnected, found by asking the plan's
// ACLs about each channel as Target.SetAuthorizer will.
func (d *daemon) describePlan(p *plan, res *control.ReloadResult) {
	res.ListenersAdded, res.ListenersRemoved, res.Sessions = []string{}, []string{}, []control.SessionChange{}
	for _, ls := range p.newListeners {
		res.ListenersAdded = append(res.ListenersAdded, ls.addr.String())
	}
	for _, ap := range p.wouldListen {
		res.ListenersAdded = append(res.ListenersAdded, ap.String())
	}
	for _, ap := range p.pending {
		if !d.pending[ap] {
			res.ListenersAdded = append(res.ListenersAdded, ap.String()+" (waits for an RDMA device with its address)")
		}
	}
	inPlan := make(map[listenAddr]bool, len(p.pending))
	for _, ap := range p.pending {
		inPlan[ap] = true
	}
	for ap := range d.listeners {
		if !p.keep[ap] {
			res.ListenersRemoved = append(res.ListenersRemoved, ap.String())
		}
	}
	for ap := range d.pending {
		if !inPlan[ap] && !p.keep[ap] && !slices.ContainsFunc(p.newListeners, func(ls *listenerState) bool { return ls.addr == ap }) {
			res.ListenersRemoved = append(res.ListenersRemoved, ap.String())
		}
	}
	slices.Sort(res.ListenersAdded)
	slices.Sort(res.ListenersRemoved)
	res.PortGroupsChanged = portGroupChanges(d.alua.Groups(), p.cfg.PortGroups())
	for _, si := range d.target.Sessions() {
		sc := control.SessionChange{Initiator: si.InitiatorPortID.String()}
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
