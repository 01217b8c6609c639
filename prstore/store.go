// Package prstore keeps the persistent reservations of a logical unit that several srptarget
// daemons (gateways in front of one Ceph RBD image) serve, in one RADOS object: the shared
// store of scsi.Reservations (scsi.PRStore), and the driver that keeps each gateway's cache
// current or marks it stale.
//
// The object's omap holds:
//
//	version           the state's version, 16 hex digits (a missing key is version 0)
//	state             the serialized state (scsi's), with the effects of its last changes
//	member.NAME       one per gateway: its token, lease and drain (memberRecord)
//
// A change is one write operation that compares version with the version the change was
// made from and sets both keys: of two gateways changing at once, one write fails the
// comparison, and that gateway reloads and tries again (scsi). The OSD applies each operation
// whole, so no reader ever sees a state without its version.
//
// Every gateway watches the object. After a change the gateway that made it notifies the
// others and waits for their acknowledgements, which each sends once it has applied the new
// version (unit attentions given, PREEMPT AND ABORT's commands aborted). A gateway that does
// not acknowledge may be dead, cut off from the cluster, or slow; the notifier then waits until
// it cannot be acting on the old version any more, and evicts it from the members:
//
//   - The lease: a gateway trusts its cache only for Lease after it read the version and found
//     it current (measured from before the read was sent). It renews the lease by reading the
//     version every Lease/4, in a read that also checks that its member key still holds its
//     token. When the lease runs out it marks its cache stale (scsi fails what a reservation
//     could conflict with), and it is evicted when its token is gone: it then registers
//     again and reloads before it trusts anything.
//   - The drain: a command admitted just before the lease ran out may still be in librbd; it
//     ends within the client's rados_osd_op_timeout, which the member record carries as
//     Drain.
//
// So a change is in force everywhere when every member acknowledged it, or Lease + Drain (and
// a margin for timers) after it was stored. A read made before the change was stored was sent
// before it, so a lease it gave lapsed by then, whatever the clocks of the two hosts read:
// only the passing of time is compared, never timestamps.
package prstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
	"go.uber.org/zap"
)

// Object is what the store needs of its RADOS object (rbd.Object through RADOS; a fake in
// tests).
type Object interface {
	ReadOmap(keys []string, cmp map[string][]byte) (map[string][]byte, error)
	ListOmap(prefix string, max int) (map[string][]byte, error)
	WriteOmap(w rbd.OmapWrite) error
	Watch(timeout time.Duration, onNotify func(rbd.Notification), onError func(error)) (Watch, error)
	Ack(n rbd.Notification, payload []byte) error
	Notify(data []byte, timeout time.Duration) (rbd.NotifyReply, error)
}

// Watch is a watch of Object.Watch.
type Watch interface {
	Close() error
}

// Cache is the cached state the store keeps current: scsi.Reservations.
type Cache interface {
	Apply(data []byte, version uint64) error
	SetFresh(fresh bool)
	Version() uint64
}

// Options configure a Store.
type Options struct {
	// Member names this gateway among the object's members: unique among the gateways of the
	// image (the daemon uses its target port name).
	Member string
	// Lease is how long a read of the version keeps the cache trusted (DefaultLease when 0).
	Lease time.Duration
	// Drain bounds the life of a command in the backstore: the RBD client's
	// rados_osd_op_timeout.
	Drain time.Duration
	Log   *zap.Logger
}

// DefaultLease is the lease when Options leave it 0: a change waits at most this plus the
// drain for a gateway that does not acknowledge it, and a gateway cut off from the cluster fails
// commands after at most this.
const DefaultLease = 5 * time.Second

// maxMembers bounds the member keys read: a handful of gateways serve an image.
const maxMembers = 64

// Omap keys.
const (
	keyVersion      = "version"
	keyState        = "state"
	keyMemberPrefix = "member."
)

// memberRecord is a member's value.
type memberRecord struct {
	Token   string `json:"token"`
	LeaseMS int64  `json:"lease_ms"`
	DrainMS int64  `json:"drain_ms"`
}

// bound is how long after a change a member that did not acknowledge it may still act on the
// version before.
func (m memberRecord) bound() time.Duration {
	d := time.Duration(m.LeaseMS+m.DrainMS) * time.Millisecond
	return d + margin(time.Duration(m.LeaseMS)*time.Millisecond)
}

// Store is one gateway's handle on the shared reservations of one logical unit.
type Store struct {
	obj   Object
	opts  Options
	log   *zap.Logger
	key   string // member.NAME
	cache Cache

	mu     sync.Mutex // guards record and watch
	record []byte     // this gateway's member record as written, which renewals compare
	watch  Watch
	closed bool

	// freshMu orders the lease's grants and lapses: held while a renewal marks the cache
	// fresh and while the lapse timer marks it stale, never while calling the object.
	freshMu  sync.Mutex
	leaseGen uint64
	lapse    *time.Timer

	notifies chan rbd.Notification
	stop     chan struct{}
	done     sync.WaitGroup
	// bg are the goroutines that replace a broken watch and close the old one: Close waits
	// for them before the object's I/O context may go.
	bg sync.WaitGroup
}

// Open registers this gateway as a member of obj's and watches it. Attach starts keeping a
// cache current.
func Open(obj Object, o Options) (*Store, error) {
	if o.Member == "" {
		return nil, errors.New("prstore: no member name")
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Store{obj: obj, opts: o, log: o.Log, key: keyMemberPrefix + o.Member,
		notifies: make(chan rbd.Notification, 16), stop: make(chan struct{})}
	if err := s.register(); err != nil {
		return nil, err
	}
	if err := s.rewatch(); err != nil {
		return nil, err
	}
	return s, nil
}

// register writes this gateway's member key with a new token (creating the object).
func (s *Store) register() error {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	rec, _ := json.Marshal(memberRecord{Token: hex.EncodeToString(tok), LeaseMS: s.opts.Lease.Milliseconds(), DrainMS: s.opts.Drain.Milliseconds()})
	if err := s.obj.WriteOmap(rbd.OmapWrite{Create: true, Set: map[string][]byte{s.key: rec}}); err != nil {
		return fmt.Errorf("prstore: registering %s: %w", s.key, err)
	}
	s.mu.Lock()
	s.record = rec
	s.mu.Unlock()
	return nil
}

// rewatch replaces the watch.
func (s *Store) rewatch() error {
	w, err := s.obj.Watch(0, func(n rbd.Notification) {
		select {
		case s.notifies <- n:
		default: // a backlog: unacknowledged, the notifier waits out our lease
		}
	}, func(err error) {
		s.log.Warn("persistent reservations: the watch broke; watching again", zap.Error(err))
		s.background(func() {
			if err := s.rewatch(); err != nil {
				s.log.Error("persistent reservations: cannot watch the shared state; changes are learned by polling", zap.Error(err))
			}
		})
	})
	if err != nil {
		return fmt.Errorf("prstore: watch: %w", err)
	}
	s.mu.Lock()
	old, closed := s.watch, s.closed
	if !closed {
		s.watch = w
	}
	s.mu.Unlock()
	if closed {
		return w.Close()
	}
	if old != nil {
		// Not here: Close waits for the old watch's callbacks, and this may run in one.
		s.background(func() { _ = old.Close() })
	}
	return nil
}

// background runs f on a goroutine that Close waits for, unless the store is closed.
func (s *Store) background(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// Attach starts keeping c current: the lease renewals and the notifies. The first renewal is
// made before it returns, so that c is fresh from the start when the cluster answers.
func (s *Store) Attach(c Cache) {
	s.cache = c
	s.renew()
	s.done.Add(2)
	go s.renewals()
	go s.applier()
}

// Close stops the store, removes this gateway's member key and marks the cache stale.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	w, tok := s.watch, s.record
	s.mu.Unlock()
	close(s.stop)
	s.done.Wait()
	s.bg.Wait()
	s.mu.Lock()
	w = s.watch // a replacement made meanwhile
	s.mu.Unlock()
	s.freshMu.Lock()
	s.leaseGen++
	if s.lapse != nil {
		s.lapse.Stop()
	}
	if s.cache != nil {
		s.cache.SetFresh(false)
	}
	s.freshMu.Unlock()
	var err error
	if w != nil {
		err = w.Close()
	}
	if e := s.obj.WriteOmap(rbd.OmapWrite{Cmp: map[string][]byte{s.key: tok}, Remove: []string{s.key}}); e != nil && !errors.Is(e, rbd.ErrCompare) && err == nil {
		err = e
	}
	return err
}
