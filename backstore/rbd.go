package backstore

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// RBD is a Ceph RBD image reached through librbd (package rbd): a disk that several hosts can
// serve at once. Writes complete when the OSDs have them, unless the RBD cache is turned on in
// the client's configuration; then FUA and Flush send librbd a flush.
type RBD struct {
	conn  *rbd.Conn
	img   *rbd.Image
	name  string
	lbs   uint32
	ro    bool
	cache bool // rbd_cache is on: writes may sit in librbd until a flush
	size  atomic.Int64

	// mu is held shared by every operation and exclusively by Close, which so waits for the
	// requests in flight and then refuses new ones.
	mu     sync.RWMutex
	closed bool
}

var _ Backstore = (*RBD)(nil)

// OpenRBD connects to the cluster and opens the image o names, with logical blocks of
// blockSize bytes (512 when 0: an image has no block size of its own), write-protected when
// readOnly; more are librados options set last (tests, tuning).
func OpenRBD(o rbd.Options, blockSize uint32, readOnly bool, more ...rbd.Setting) (*RBD, error) {
	blockSize, err := checkBlockSize("rbd", blockSize)
	if err != nil {
		return nil, err
	}
	o = o.WithDefaults()
	name := o.ImageName()
	conn, err := rbd.Connect(o, more...)
	if err != nil {
		return nil, fmt.Errorf("rbd %s: %w", name, err)
	}
	cache, err := conn.ConfGet("rbd_cache")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rbd %s: %w", name, err)
	}
	img, err := conn.OpenImage(o.Pool, o.Namespace, o.Image, readOnly, 0)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("rbd %s: %w", name, err)
	}
	r := &RBD{conn: conn, img: img, name: name, lbs: blockSize, ro: readOnly, cache: cache == "true"}
	if _, err := r.refresh(); err != nil {
		img.Close()
		conn.Close()
		return nil, err
	}
	return r, nil
}

// Conn is the image's cluster connection, for other objects of the image's pool (the shared
// persistent reservations).
func (r *RBD) Conn() *rbd.Conn { return r.conn }

// refresh reads the image's size, rounded down to whole blocks.
func (r *RBD) refresh() (int64, error) {
	size, err := r.img.Size()
	if err != nil {
		return 0, fmt.Errorf("rbd %s: rbd_get_size: %w", r.name, err)
	}
	s := int64(size) &^ int64(r.lbs-1)
	r.size.Store(s)
	return s, nil
}

var _ CompareAndWriter = (*RBD)(nil)

func (r *RBD) Size() int64 { return r.size.Load() }

// Refresh re-reads the size; librbd follows a resize made by another client (rbd resize) on
// its own, through the image header's watch.
func (r *RBD) Refresh() (int64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return 0, fmt.Errorf("rbd %s: refresh: %w", r.name, ErrClosed)
	}
	return r.refresh()
}

// OnResize calls fn, on a goroutine of librbd's watch, whenever the image header changes,
// so that a resize made elsewhere raises CAPACITY DATA HAS CHANGED without a reload. fn
// calls Refresh (through the logical unit) and compares.
func (r *RBD) OnResize(fn func()) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return fmt.Errorf("rbd %s: watch: %w", r.name, ErrClosed)
	}
	if err := r.img.Watch(fn); err != nil {
		return fmt.Errorf("rbd %s: %w", r.name, err)
	}
	return nil
}

func (r *RBD) LogicalBlockSize() uint32 { return r.lbs }

// PhysicalBlockSize is 4 KiB (or the logical block when larger): RBD objects are megabytes,
// but librbd handles 4 KiB writes without a read-modify-write of its own.
func (r *RBD) PhysicalBlockSize() uint32 { return max(r.lbs, 4096) }

func (r *RBD) ReadOnly() bool { return r.ro }

func (r *RBD) Capabilities() Capabilities {
	return Capabilities{Unmap: !r.ro, UnmapZeroes: true}
}

// Close waits for the requests in flight, closes the image and disconnects.
func (r *RBD) Close() error {
	// The resize callback may be waiting in Refresh for mu: end the watch before taking it.
	if err := r.img.Unwatch(); err != nil {
		return fmt.Errorf("rbd %s: %w", r.name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("rbd %s: close: %w", r.name, ErrClosed)
	}
	r.closed = true
	err := r.img.Close()
	r.conn.Close()
	if err != nil {
		return fmt.Errorf("rbd %s: %w", r.name, err)
	}
	return nil
}
