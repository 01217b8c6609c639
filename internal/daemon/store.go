package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
)

// storeKey is what makes two LUN definitions use the same backstore: a reload that keeps the
// key keeps the open file, device or memory (and with memory, the data), even when the
// logical unit on top changes (a new serial or vendor string).
type storeKey struct {
	kind config.BackstoreKind
	// path is the cleaned path of a file or block device.
	path string
	// lun ties a memory or null backstore to its LUN number: memory has no other name.
	lun       int
	size      config.Size
	blockSize int // 0 for block devices: the device has its own
	create    bool
	readOnly  bool
	// rbd names an RBD image and its cluster.
	rbd config.RBD
	// allowShared is part of the key so that a reload that withdraws allow_shared_file opens
	// the file again, under the owner and mode checks.
	allowShared bool
}

func storeKeyOf(l *config.LUN) storeKey {
	k := storeKey{kind: l.Backstore, size: l.Size, blockSize: l.BlockSize, create: l.Create, readOnly: l.ReadOnly, allowShared: l.AllowSharedFile}
	switch l.Backstore {
	case "file", "block":
		k.path = filepath.Clean(l.Path)
	case "rbd":
		if l.RBD != nil {
			k.rbd = *l.RBD
		}
		k.size, k.create = 0, false
	default:
		k.lun = *l.LUN
		k.readOnly = false // RAM has no read-only mode; the logical unit enforces it
	}
	if l.Backstore == "block" {
		k.blockSize, k.size, k.create = 0, 0, false
	}
	return k
}

func (k storeKey) String() string {
	switch k.kind {
	case "file":
		return "file " + k.path
	case "block":
		return "block device " + k.path
	case "rbd":
		return "rbd image " + k.rbd.ImageName()
	}
	return fmt.Sprintf("%s %v (LUN %d)", k.kind, k.size, k.lun)
}

// sharedStore is a backstore shared by the logical units of successive configurations. Each
// logical unit made over it holds a reference, and the logical unit's Close (which
// scsi.LogicalUnit documents as closing its backstore) drops it; the last one flushes and
// closes the real backstore.
//
// It also makes closing safe while commands may still run: a reload swaps the LUN maps first
// and retires removed logical units afterwards (daemon.retire: their commands in progress
// finish first), but a unit retired after retireTimeout, or one a racing login still maps,
// can see a command on its way into the backstore after its reference is gone: guardedStore
// refuses it. Closing happens on its own goroutine (tracked by closers) so that a reload never
// waits for a slow device.
type sharedStore struct {
	guardedStore
	created bool // the file did not exist: a failed reload removes it again
	refs    atomic.Int32
	log     *zap.Logger
	closers *sync.WaitGroup
	// onErr receives flush and close failures, so that shutdown can exit non-zero.
	onErr func(error)

	// madeDirs are the directories the file's creation made (backstore.OpenFile makes the
	// missing ones), deepest first: a failed start or reload removes them too.
	madeDirs []string

	lusMu sync.Mutex
	lus   []*scsi.LogicalUnit // the logical units made over this store (watchResize)

	// pr are the persistent reservations that every gateway of an RBD image shares
	// (pr_store: rados), kept as long as the image is open; prClose leaves them.
	pr      *scsi.Reservations
	prClose func() error
}

// prObjectName is the RADOS object, in the image's pool and namespace, that keeps the
// persistent reservations of image.
func prObjectName(image string) string { return "srptarget_pr." + image }

// sharedReservations returns the reservations of the RBD image s, shared with the other
// gateways that serve it, opening them the first time; member names this gateway among them.
func (s *sharedStore) sharedReservations(r *config.RBD, member string) (*scsi.Reservations, error) {
	if s.pr != nil {
		return s.pr, nil
	}
	if !rbdBuilt {
		return nil, errNoRBD
	}
	pr, closeFn, err := openSharedPR(s.Backstore, r, member, s.log)
	if err != nil {
		return nil, err
	}
	s.pr, s.prClose = pr, closeFn
	return pr, nil
}

// openStore opens the backstore of LUN l.
func openStore(l *config.LUN, log *zap.Logger, closers *sync.WaitGroup) (*sharedStore, error) {
	s := &sharedStore{guardedStore: guardedStore{key: storeKeyOf(l)}, log: log, closers: closers}
	var err error
	switch l.Backstore {
	case "file":
		if _, statErr := os.Lstat(l.Path); errors.Is(statErr, os.ErrNotExist) {
			s.created = true
			if l.Create {
				s.madeDirs = missingDirs(l.Path)
			}
		}
		var f *backstore.File
		f, err = backstore.OpenFile(l.Path, backstore.FileOptions{
			Size:             int64(l.Size),
			Create:           l.Create,
			ReadOnly:         l.ReadOnly,
			LogicalBlockSize: uint32(l.BlockSize),
			AllowSharedFile:  l.AllowSharedFile,
		})
		if err == nil {
			s.Backstore = f
		}
	case "block":
		var b *backstore.Block
		b, err = backstore.OpenBlock(l.Path, backstore.BlockOptions{ReadOnly: l.ReadOnly, AllowSharedFile: l.AllowSharedFile})
		if err == nil {
			s.Backstore = b
		}
	case "memory":
		var m *backstore.Memory
		m, err = backstore.NewMemory(int64(l.Size), uint32(l.BlockSize))
		if err == nil {
			s.Backstore = m
		}
	case "null":
		var n *backstore.Null
		n, err = backstore.NewNull(int64(l.Size), uint32(l.BlockSize))
		if err == nil {
			s.Backstore = n
		}
	case "rbd":
		if l.RBD == nil {
			err = errors.New("rbd backstore without rbd settings")
		} else {
			s.Backstore, err = openRBD(l.RBD, uint32(l.BlockSize), l.ReadOnly)
		}
	default:
		err = fmt.Errorf("unknown backstore %q", l.Backstore)
	}
	if err != nil {
		removeDirs(s.madeDirs)
		return nil, err
	}
	return s, nil
}

var errNoRBD = errors.New("this srptarget is built without RBD support (build with -tags rbd where librbd-dev and librados-dev are installed; make build does)")

// resizeNotifier is a backstore whose size can change under it and that says so (RBD: the
// image's header watch), so that CAPACITY DATA HAS CHANGED needs no reload.
type resizeNotifier interface {
	OnResize(fn func()) error
}

// watchResize has the logical units over s re-read their capacity whenever the backstore
// reports a change. The callback runs on the backstore's own goroutine: it takes no daemon
// lock, only the logical units' own.
func (s *sharedStore) watchResize() error {
	rn, ok := s.Backstore.(resizeNotifier)
	if !ok {
		return nil
	}
	return rn.OnResize(func() {
		s.lusMu.Lock()
		lus := append([]*scsi.LogicalUnit(nil), s.lus...)
		s.lusMu.Unlock()
		for _, lu := range lus {
			if changed, err := lu.RefreshCapacity(); err != nil {
				if !errors.Is(err, backstore.ErrClosed) {
					s.log.Warn("re-reading the capacity after a change of the image failed", zap.Stringer("backstore", s.key), zap.Error(err))
				}
			} else if changed {
				s.log.Info("capacity changed: CAPACITY DATA HAS CHANGED pending for every initiator",
					zap.Stringer("backstore", s.key), zap.Stringer("size", config.Size(lu.Blocks()*uint64(lu.BlockSize()))))
			}
		}
	})
}

// addLU records a logical unit made over s, for watchResize. Logical units retired later stay
// listed: refreshing one that no initiator reaches any more changes nothing.
func (s *sharedStore) addLU(lu *scsi.LogicalUnit) {
	s.lusMu.Lock()
	s.lus = append(s.lus, lu)
	s.lusMu.Unlock()
}

// missingDirs returns the directories above path that do not exist, deepest first.
func missingDirs(path string) []string {
	var dirs []string
	for d := filepath.Dir(path); d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// removeDirs removes dirs, deepest first, as long as they are empty: rmdir(2) refuses a
// directory that something else has been put in since.
func removeDirs(dirs []string) {
	for _, d := range dirs {
		if os.Remove(d) != nil {
			return
		}
	}
}

func (s *sharedStore) acquire() { s.refs.Add(1) }

// Close drops one logical unit's reference. The last one starts the final flush and close.
func (s *sharedStore) Close() error {
	if n := s.refs.Add(-1); n > 0 {
		return nil
	} else if n < 0 {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	s.closers.Add(1)
	go func() {
		defer s.closers.Done()
		s.finish(false)
	}()
	return nil
}

// discard closes a backstore that a failed reload opened and no logical unit uses, removing
// the file it created.
func (s *sharedStore) discard() {
	s.finish(true)
}

// finish waits for the operations in progress, then flushes and closes the backstore.
func (s *sharedStore) finish(discard bool) {
	s.closeGuard()
	log := s.log.With(zap.Stringer("backstore", s.key))
	if s.prClose != nil {
		if err := s.prClose(); err != nil {
			log.Warn("leaving the shared persistent reservations failed: the other gateways wait out this one's lease once", zap.Error(err))
		}
	}
	if !s.ReadOnly() {
		if err := s.Backstore.Flush(); err != nil {
			log.Error("flushing the backstore before closing it failed: recent writes may be lost", zap.Error(err))
			s.report(fmt.Errorf("flushing %v: %w", s.key, err))
		}
	}
	if err := s.Backstore.Close(); err != nil {
		log.Error("closing the backstore failed", zap.Error(err))
		s.report(fmt.Errorf("closing %v: %w", s.key, err))
		return
	}
	if discard && s.created {
		if err := os.Remove(s.key.path); err != nil {
			log.Warn("removing the file made for a failed reload", zap.Error(err))
		}
		removeDirs(s.madeDirs)
		return
	}
	log.Debug("backstore flushed and closed")
}

func (s *sharedStore) report(err error) {
	if s.onErr != nil {
		s.onErr(err)
	}
}

// closers are the backstores being flushed and closed, and the retired logical units whose
// commands are being waited for, each on a goroutine of its own (sharedStore.Close,
// daemon.retire); what failed is kept for shutdown to report.
type closers struct {
	sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// record keeps a flush or close failure.
func (c *closers) record(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

// wait waits for every close in progress and returns what failed.
func (c *closers) wait() []error {
	c.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errs)
}
