package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

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
// can see a command on its way into the backstore after its reference is gone. Every
// operation holds mu shared; closing takes it exclusively, so it waits for operations already
// inside and refuses later ones with backstore.ErrClosed. Closing happens on its own goroutine
// (tracked by closers) so that a reload never waits for a slow device.
type sharedStore struct {
	backstore.Backstore
	key     storeKey
	created bool // the file did not exist: a failed reload removes it again
	refs    atomic.Int32
	log     *zap.Logger
	closers *sync.WaitGroup
	// onErr receives flush and close failures, so that shutdown can exit non-zero.
	onErr func(error)

	// madeDirs are the directories the file's creation made (backstore.OpenFile makes the
	// missing ones), deepest first: a failed start or reload removes them too.
	madeDirs []string

	mu     sync.RWMutex
	closed bool

	lusMu sync.Mutex
	lus   []*scsi.LogicalUnit // the logical units made over this store (watchResize)

	// pr are the persistent reservations that every gateway of an RBD image shares
	// (pr_store: rados), kept as long as the image is open; prClose leaves them.
	pr      *scsi.Reservations
	prClose func() error
}

// openSharedPR opens the shared persistent reservations of an RBD image (prstore); nil
// without the build tag rbd.
var openSharedPR func(b backstore.Backstore, r *config.RBD, member string, log *zap.Logger) (*scsi.Reservations, func() error, error)

// prObjectName is the RADOS object, in the image's pool and namespace, that keeps the
// persistent reservations of image.
func prObjectName(image string) string { return "srptarget_pr." + image }

// sharedReservations returns the reservations of the RBD image s, shared with the other
// gateways that serve it, opening them the first time; member names this gateway among them.
func (s *sharedStore) sharedReservations(r *config.RBD, member string) (*scsi.Reservations, error) {
	if s.pr != nil {
		return s.pr, nil
	}
	if openSharedPR == nil {
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
	s := &sharedStore{key: storeKeyOf(l), log: log, closers: closers}
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
		if openRBD == nil {
			err = errNoRBD
		} else if l.RBD == nil {
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

// openRBD opens an RBD image; nil when the daemon is built without the build tag rbd
// (store_rbd.go sets it), as librbd is then not linked in.
var openRBD func(r *config.RBD, blockSize uint32, readOnly bool) (backstore.Backstore, error)

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

// NonBlocking forwards the store's backstore.NonBlocking. Without it every RAM and null LUN of
// the daemon ran its commands on a worker goroutine, two goroutine hand-offs per command
// (often a thread wake-up each) that srp's channel skips for a store that never waits for
// I/O. Holding mu shared never waits for I/O here either: closing a RAM store is a free.
func (s *sharedStore) NonBlocking() bool {
	nb, ok := s.Backstore.(backstore.NonBlocking)
	return ok && nb.NonBlocking()
}

func (s *sharedStore) ReadAt(p []byte, off int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.ReadAt(p, off)
}

func (s *sharedStore) WriteAt(p []byte, off int64, fua bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.WriteAt(p, off, fua)
}

func (s *sharedStore) Flush() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.Flush()
}

func (s *sharedStore) Unmap(off, length int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.Unmap(off, length)
}

func (s *sharedStore) WriteZeroes(off, length int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.WriteZeroes(off, length)
}

func (s *sharedStore) Refresh() (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	return s.Backstore.Refresh()
}

// Mapping implements backstore.Mapper for GET LBA STATUS: the store's own map where it keeps
// one (file, memory), and every block mapped for one that does not (null), which is what the
// SCSI layer assumes of a store without a map.
func (s *sharedStore) Mapping(off, limit int64) (bool, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false, 0, fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	if m, ok := s.Backstore.(backstore.Mapper); ok {
		return m.Mapping(off, limit)
	}
	size := s.Backstore.Size()
	if off < 0 || off >= size || limit <= 0 {
		return false, 0, fmt.Errorf("%v: mapping of %d bytes at %d: %w", s.key, limit, off, backstore.ErrOutOfRange)
	}
	return true, off + min(limit, size-off), nil
}

var _ backstore.Mapper = (*sharedStore)(nil)

// AtomicLimits forwards the store's backstore.AtomicWriter: its limits, none for a store without
// atomic writes (then WRITE ATOMIC(16) is not offered).
func (s *sharedStore) AtomicLimits() backstore.AtomicLimits {
	if aw, ok := s.Backstore.(backstore.AtomicWriter); ok {
		return aw.AtomicLimits()
	}
	return backstore.AtomicLimits{}
}

// WriteAtomicAt forwards an atomic write; only called within AtomicLimits.
func (s *sharedStore) WriteAtomicAt(p []byte, off int64, fua bool) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	aw, ok := s.Backstore.(backstore.AtomicWriter)
	if !ok {
		return fmt.Errorf("%v: atomic write: %w", s.key, unix.EOPNOTSUPP)
	}
	return aw.WriteAtomicAt(p, off, fua)
}

var _ backstore.AtomicWriter = (*sharedStore)(nil)

// CompareAndWriteMax forwards the store's backstore.CompareAndWriter (0: it has none).
func (s *sharedStore) CompareAndWriteMax() int {
	if cw, ok := s.Backstore.(backstore.CompareAndWriter); ok {
		return cw.CompareAndWriteMax()
	}
	return 0
}

func (s *sharedStore) CompareAndWrite(cmp, data []byte, off int64) (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, fmt.Errorf("%v: %w", s.key, backstore.ErrClosed)
	}
	cw, ok := s.Backstore.(backstore.CompareAndWriter)
	if !ok {
		return 0, fmt.Errorf("%v: compare and write: %w", s.key, errors.ErrUnsupported)
	}
	return cw.CompareAndWrite(cmp, data, off)
}

var _ backstore.CompareAndWriter = (*sharedStore)(nil)

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
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
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
