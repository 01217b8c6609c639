package daemon

import (
	"github.com/srptarget/srptarget/config"
)

// prepared are backstores opened for a configuration before the daemon lock is taken: opening
// one may wait (an RBD image whose monitors do not answer, up to rados_mount_timeout; a slow
// disk), and nothing that waits runs under the lock. A plan takes them from here (planLUN);
// what it did not take, or gave back on rollback, is closed by close, again without the lock.
type prepared struct {
	stores map[storeKey]*sharedStore
	errs   map[storeKey]error // what opening each store that failed gave
}

// prepare opens the backstores of cfg that the running configuration does not have open, as a
// reload's plan would. The running stores are looked at under the lock, briefly; the opening
// is done without it. Reloads are serialised (reloadMu), so the running stores cannot change
// meanwhile but through a start after a device appeared: a store both opened there and here
// is found running by the plan, and this one is closed.
func (d *daemon) prepare(cfg *config.Config) *prepared {
	d.mu.Lock()
	running := make(map[storeKey]bool, len(d.stores))
	for k := range d.stores {
		running[k] = true
	}
	d.mu.Unlock()
	return d.openNew(cfg, running, true)
}

// prepareStop is prepare, given up when stop closes first (errReloadStopped): the stores are
// then closed once opened, by the goroutine that opens them.
func (d *daemon) prepareStop(cfg *config.Config, stop <-chan struct{}) (*prepared, error) {
	done := make(chan *prepared, 1)
	go func() { done <- d.prepare(cfg) }()
	select {
	case pre := <-done:
		return pre, nil
	case <-stop:
		go func() { (<-done).close() }()
		return nil, errReloadStopped
	}
}

// openNew opens the backstores of cfg not among running (a block device claimed by a running
// LUN is left to the plan, which refuses it). create says whether files with create: true may
// be made: a dry run makes none, and skips them.
func (d *daemon) openNew(cfg *config.Config, running map[storeKey]bool, create bool) *prepared {
	pre := &prepared{stores: make(map[storeKey]*sharedStore), errs: make(map[storeKey]error)}
	for i := range cfg.LUNs {
		l := cfg.LUNs[i]
		sk := storeKeyOf(&l)
		switch {
		case running[sk] || pre.has(sk):
			continue
		case !create && l.Backstore == "file" && l.Create && !pathExists(l.Path):
			continue
		case l.Backstore == "block" && blockInUse(running, sk.path):
			continue
		}
		s, err := openStore(&l, d.log, &d.closers.WaitGroup)
		if err != nil {
			pre.errs[sk] = err
			continue
		}
		pre.stores[sk] = s
	}
	return pre
}

// has reports whether pre opened, or failed to open, the store of key k.
func (pre *prepared) has(k storeKey) bool {
	if pre == nil {
		return false
	}
	_, ok := pre.stores[k]
	return ok || pre.errs[k] != nil
}

// take hands the store of key k to a plan, or the error opening it gave.
func (pre *prepared) take(k storeKey) (*sharedStore, error) {
	if err := pre.errs[k]; err != nil {
		return nil, err
	}
	s := pre.stores[k]
	delete(pre.stores, k)
	return s, nil
}

// giveBack returns a store a rolled-back plan took, for close.
func (pre *prepared) giveBack(k storeKey, s *sharedStore) { pre.stores[k] = s }

// close closes the stores no plan took, removing a file made for them (discard). Call it
// without the daemon lock.
func (pre *prepared) close() {
	for k, s := range pre.stores {
		s.discard()
		delete(pre.stores, k)
	}
}
