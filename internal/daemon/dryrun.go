package daemon

// Dry runs (srptarget reload --dry-run, validate --diff): what a reload would change, with
// nothing applied, and nothing slow done under the daemon lock.
//
// The plan itself is made under the lock, as a reload's, but from memory only: the running
// backstores, and for the others a stand-in (standIn). What a reload would find when it opens
// the others is learnt by opening them, then closing them, before the plan and without the
// lock (probe): an RBD image whose monitors never answer keeps that dry run waiting, not
// status, reload or the shutdown. A configuration a client sends is a different matter: the
// daemon would open, with its own privileges, files, devices and clusters that the client
// names, and tell it what it found. So for a client that is neither root nor the daemon's
// user its text alone is planned (config.ParseText, no probe) and the answer says that the
// paths were not checked.

import (
	"cmp"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
)

// candidate is a configuration a client sent to be planned in place of the daemon's file
// (validate --diff), named name in messages.
type candidate struct {
	name string
	text []byte
}

// dryRun plans a reload with cand (nil: the daemon's own file) and applies nothing. With check,
// the backstores the running configuration does not have open are opened and closed again
// (probe), and the configuration's paths are looked at as validate does; without it, nothing
// the configuration names is opened or looked at. A close of stop ends the wait for the probe.
func (d *daemon) dryRun(cand *candidate, check bool, stop <-chan struct{}) (*control.ReloadResult, error) {
	res := &control.ReloadResult{DryRun: true, PathsNotChecked: !check}
	name := d.opts.configFile
	if cand != nil {
		name = cmp.Or(cand.name, "configuration")
	}
	d.log.Info("planning a reload without applying it (dry run)", zap.String("config", name), zap.Bool("paths_checked", check))
	if err := d.dryRunPlan(res, name, cand, check, stop); errors.Is(err, control.ErrClosing) {
		return nil, err
	} else if err != nil {
		errs := asConfigErrors(err, name)
		slices.SortStableFunc(errs, func(a, b *config.Error) int { return a.Line - b.Line })
		res.Errors = errorLines(errs)
		return res, errs
	}
	return res, nil
}

func (d *daemon) dryRunPlan(res *control.ReloadResult, name string, cand *candidate, check bool, stop <-chan struct{}) error {
	var cfg *config.Config
	var err error
	switch {
	case cand == nil:
		cfg, err = config.LoadTrusted(d.opts.configFile)
	case check:
		cfg, err = config.Parse(name, cand.text)
	default:
		cfg, err = config.ParseText(name, cand.text)
	}
	if err != nil {
		return err
	}
	var errs config.Errors
	if check {
		if errs, err = d.probe(cfg, stop); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return errReloadStopped
	}
	p, err := d.planChanges(cfg, res, true, nil)
	if err != nil {
		errs = append(errs, asConfigErrors(err, name)...)
	} else {
		p.rollback()
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// probe opens, then closes, the backstores of cfg that the running configuration does not
// have open, as a reload would open them, reads the state files it would read, and returns
// what a reload would refuse among them.
// Opening may wait (an RBD image whose monitors do not answer waits up to
// rados_mount_timeout): it runs without the daemon lock, on a goroutine of its own, which
// finishes alone when stop closes first (the daemon shuts down). A reload at the same time
// may find a block device the probe holds open (O_EXCL) and be refused: it changes nothing
// then, and can be run again.
func (d *daemon) probe(cfg *config.Config, stop <-chan struct{}) (config.Errors, error) {
	d.mu.Lock()
	var known probeKnown
	known.stores = make(map[storeKey]bool, len(d.stores))
	for k := range d.stores {
		known.stores[k] = true
	}
	known.stateFiles = make(map[string]bool, len(d.prs))
	for path := range d.prs {
		known.stateFiles[path] = true
	}
	known.ident = d.ident
	d.mu.Unlock()
	done := make(chan config.Errors, 1)
	go func() { done <- append(d.probeStores(cfg, known.stores), probeStateFiles(cfg, known)...) }()
	select {
	case errs := <-done:
		return errs, nil
	case <-stop:
		return nil, control.ErrClosing
	}
}

func (d *daemon) probeStores(cfg *config.Config, running map[storeKey]bool) config.Errors {
	pre := d.openNew(cfg, running, false)
	defer pre.close()
	var errs config.Errors
	said := make(map[storeKey]bool)
	for i := range cfg.LUNs {
		l := cfg.LUNs[i]
		if sk := storeKeyOf(&l); pre.errs[sk] != nil && !said[sk] {
			said[sk] = true
			errs = append(errs, openStoreError(cfg, i, pre.errs[sk]))
		}
	}
	return errs
}

// probeKnown is what the running daemon has open: its backstores, the state files it has read
// (daemon.prs) and its identity, which default serials are made of.
type probeKnown struct {
	stores     map[storeKey]bool
	stateFiles map[string]bool
	ident      Identity
}

// probeStateFiles reads the APTPL state files a reload would read for cfg (those of the
// serials the daemon has not seen) and returns what it would refuse among them.
func probeStateFiles(cfg *config.Config, known probeKnown) config.Errors {
	var errs config.Errors
	for _, l := range cfg.LUNs {
		path := filepath.Join(cfg.StateDir, prFileName(cmp.Or(l.Serial, defaultSerial(known.ident, *l.LUN))))
		if known.stateFiles[path] {
			continue
		}
		data, err := readStateFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			errs = append(errs, cfg.ErrorAt(config.At("state_dir"), "lun %d: reading the persistent reservations: %v", *l.LUN, err))
		default:
			if _, err := scsi.LoadReservations(data, nil); err != nil {
				errs = append(errs, cfg.ErrorAt(config.At("state_dir"), "lun %d: %s: %v (move the file away to start without them)", *l.LUN, path, err))
			}
		}
	}
	return errs
}

// blockInUse tells whether a block device at path is among the stores.
func blockInUse(stores map[storeKey]bool, path string) bool {
	for k := range stores {
		if k.kind == "block" && k.path == path {
			return true
		}
	}
	return false
}

// openStoreError is the configuration error of a backstore of cfg.LUNs[i] that did not open.
func openStoreError(cfg *config.Config, i int, err error) *config.Error {
	var shared *backstore.SharedFileError
	switch {
	case errors.As(err, &shared):
		return cfg.ErrorAt(config.At("luns", i, "path"), "opening the backstore: %v (allow_shared_file: true on this LUN)", err)
	case errors.Is(err, backstore.ErrSymlink):
		return cfg.ErrorAt(config.At("luns", i, "path"), "opening the backstore: %v", err)
	}
	return cfg.ErrorAt(config.At("luns", i), "opening the backstore: %v", err)
}

// standIn is the backstore a dry run plans a LUN with when the running configuration does
// not have its own open: a null backstore of the LUN's size (some size when the LUN has none of
// its own) and block size, under the LUN's store key. It opens and reads nothing.
func (d *daemon) standIn(l *config.LUN) (*sharedStore, error) {
	bs := cmp.Or(l.BlockSize, config.DefaultBlockSize)
	size := cmp.Or(l.Size, config.Size(bs)*2048)
	s, err := openStore(&config.LUN{LUN: l.LUN, Backstore: "null", Size: size, BlockSize: bs}, d.log, &d.closers.WaitGroup)
	if err != nil {
		return nil, err
	}
	s.key = storeKeyOf(l)
	return s, nil
}
