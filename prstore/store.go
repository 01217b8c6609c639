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
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore/rbd"
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

// margin covers timer lateness and clock rate differences over a lease.
func margin(lease time.Duration) time.Duration { return lease/10 + 100*time.Millisecond }

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

func encodeVersion(v uint64) []byte {
	if v == 0 {
		return nil // version 0 is the missing key, which compares as empty
	}
	return fmt.Appendf(nil, "%016x", v)
}

func decodeVersion(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) != 16 {
		return 0, fmt.Errorf("prstore: version %q is not 16 hex digits", b)
	}
	return strconv.ParseUint(string(b), 16, 64)
}

// Load returns the stored state and its version (scsi.PRStore).
func (s *Store) Load() ([]byte, uint64, error) {
	vals, err := s.obj.ReadOmap([]string{keyVersion, keyState}, nil)
	if err != nil {
		return nil, 0, err
	}
	v, err := decodeVersion(vals[keyVersion])
	if err != nil {
		return nil, 0, err
	}
	data := vals[keyState]
	if v == 0 {
		data = nil
	}
	return data, v, nil
}

// Commit stores data as version old+1 if old is still current (scsi.PRStore).
func (s *Store) Commit(old uint64, data []byte) (bool, error) {
	err := s.obj.WriteOmap(rbd.OmapWrite{
		Cmp: map[string][]byte{keyVersion: encodeVersion(old)},
		Set: map[string][]byte{keyVersion: encodeVersion(old + 1), keyState: data},
	})
	if errors.Is(err, rbd.ErrCompare) {
		return false, nil
	}
	return err == nil, err
}

// ackPayload is a member's acknowledgement of version v: its name and the version.
func ackPayload(member string, v uint64) []byte { return fmt.Appendf(nil, "%s %d", member, v) }

func parseAck(b []byte) (member string, v uint64, ok bool) {
	i := bytes.LastIndexByte(b, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseUint(string(b[i+1:]), 10, 64)
	return string(b[:i]), v, err == nil
}

// members reads the member records.
func (s *Store) members() (map[string]memberRecord, map[string][]byte, error) {
	raw, err := s.obj.ListOmap(keyMemberPrefix, maxMembers)
	if err != nil {
		return nil, nil, err
	}
	ms := make(map[string]memberRecord, len(raw))
	for k, b := range raw {
		var m memberRecord
		if json.Unmarshal(b, &m) != nil || m.LeaseMS <= 0 || m.DrainMS < 0 {
			s.log.Warn("persistent reservations: a member record that cannot be read; waiting the longest for it", zap.String("key", k))
			m = memberRecord{LeaseMS: time.Hour.Milliseconds()}
		}
		ms[k[len(keyMemberPrefix):]] = m
	}
	return ms, raw, nil
}

// Publish tells the other members of version v and returns once each has applied it, or has
// fenced itself (its lease and drain bound passed since the call), evicting those (scsi.PRStore).
func (s *Store) Publish(v uint64) error {
	start := time.Now()
	ms, raw, err := s.members()
	if err != nil {
		// Who to wait for is unknown: wait as long as this gateway's own bound, the one
		// its peers are configured like.
		self := memberRecord{LeaseMS: s.opts.Lease.Milliseconds(), DrainMS: s.opts.Drain.Milliseconds()}
		s.log.Warn("persistent reservations: cannot read the members; waiting out the lease", zap.Error(err))
		time.Sleep(time.Until(start.Add(self.bound())))
		return err
	}
	delete(ms, s.opts.Member)
	if len(ms) == 0 {
		return nil
	}
	var longest time.Duration
	for _, m := range ms {
		longest = max(longest, m.bound())
	}
	reply, err := s.obj.Notify(fmt.Appendf(nil, "%d", v), longest)
	if err != nil {
		s.log.Warn("persistent reservations: notify failed; waiting out the members' leases", zap.Error(err))
	}
	for _, a := range reply.Acks {
		if name, av, ok := parseAck(a.Payload); ok && av >= v {
			delete(ms, name)
		}
	}
	for name, m := range ms {
		time.Sleep(time.Until(start.Add(m.bound())))
		// It has fenced itself. Evict it, unless it registered again meanwhile, so that the
		// next change does not wait for it: its next renewal finds its key gone.
		err := s.obj.WriteOmap(rbd.OmapWrite{Cmp: map[string][]byte{keyMemberPrefix + name: raw[keyMemberPrefix+name]}, Remove: []string{keyMemberPrefix + name}})
		if err != nil && !errors.Is(err, rbd.ErrCompare) {
			s.log.Warn("persistent reservations: cannot evict a member", zap.String("member", name), zap.Error(err))
		}
		s.log.Warn("persistent reservations: a gateway did not acknowledge a change; it was fenced by its lease and is evicted",
			zap.String("member", name), zap.Uint64("version", v), zap.Duration("waited", time.Since(start)))
	}
	return nil
}

// Announce tells the other members of version v without waiting for their acknowledgements
// or evicting any (scsi's announce: a change that fences nothing). A member that misses the
// notification learns of v from its next renewal, within Lease/4, or fails closed when its
// lease ends. Close waits for the notification, at most Lease.
func (s *Store) Announce(v uint64) {
	s.background(func() {
		if _, err := s.obj.Notify(fmt.Appendf(nil, "%d", v), s.opts.Lease); err != nil {
			s.log.Debug("persistent reservations: notify of a change not waited for failed; the others learn of it from their renewals",
				zap.Uint64("version", v), zap.Error(err))
		}
	})
}

// applier applies the versions that notifies announce, and acknowledges them.
func (s *Store) applier() {
	defer s.done.Done()
	for {
		select {
		case <-s.stop:
			return
		case n := <-s.notifies:
			v, err := strconv.ParseUint(string(n.Data), 10, 64)
			if err != nil {
				s.log.Warn("persistent reservations: a notify that is not a version", zap.ByteString("data", n.Data))
				continue
			}
			if s.cache.Version() < v {
				if err := s.refresh(); err != nil {
					s.log.Warn("persistent reservations: a change announced cannot be loaded; not acknowledged", zap.Uint64("version", v), zap.Error(err))
					continue
				}
			}
			if err := s.obj.Ack(n, ackPayload(s.opts.Member, s.cache.Version())); err != nil {
				s.log.Warn("persistent reservations: acknowledging a change failed", zap.Uint64("version", v), zap.Error(err))
			}
		}
	}
}

// refresh loads the stored state and applies it.
func (s *Store) refresh() error {
	data, v, err := s.Load()
	if err != nil {
		return err
	}
	return s.cache.Apply(data, v)
}

// renewals renews the lease every Lease/4 until Close.
func (s *Store) renewals() {
	defer s.done.Done()
	t := time.NewTicker(s.opts.Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.renew()
	}
}

// renew reads the version, checking membership in the same read, and grants a lease from the
// time the read was sent when the cache is current (after applying a newer version).
func (s *Store) renew() {
	sent := time.Now()
	s.mu.Lock()
	rec := s.record
	s.mu.Unlock()
	vals, err := s.obj.ReadOmap([]string{keyVersion}, map[string][]byte{s.key: rec})
	switch {
	case errors.Is(err, rbd.ErrCompare):
		s.log.Warn("persistent reservations: this gateway was evicted (it missed a change for longer than its lease); registering again")
		s.lapseNow()
		if err := s.register(); err != nil {
			s.log.Error("persistent reservations: registering again failed", zap.Error(err))
		}
		return // the next renewal grants a lease
	case err != nil:
		s.log.Debug("persistent reservations: lease renewal failed", zap.Error(err))
		return
	}
	v, err := decodeVersion(vals[keyVersion])
	if err != nil {
		s.log.Error("persistent reservations: the shared state's version cannot be read", zap.Error(err))
		return
	}
	if s.cache.Version() < v {
		if err := s.refresh(); err != nil {
			s.log.Warn("persistent reservations: loading the shared state failed", zap.Error(err))
			return
		}
	}
	if s.cache.Version() < v {
		return
	}
	s.grant(sent)
}

// grant marks the cache fresh until Lease after sent, less the margin, unless that is past.
func (s *Store) grant(sent time.Time) {
	until := sent.Add(s.opts.Lease - margin(s.opts.Lease))
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return
	}
	s.leaseGen++
	gen := s.leaseGen
	if s.lapse != nil {
		s.lapse.Stop()
	}
	s.lapse = time.AfterFunc(d, func() {
		s.freshMu.Lock()
		defer s.freshMu.Unlock()
		if s.leaseGen == gen {
			s.log.Warn("persistent reservations: the lease lapsed (the shared state could not be read in time); commands that a reservation could conflict with fail until it is renewed")
			s.cache.SetFresh(false)
		}
	})
	s.cache.SetFresh(true)
}

// lapseNow ends the lease at once.
func (s *Store) lapseNow() {
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	s.leaseGen++
	if s.lapse != nil {
		s.lapse.Stop()
	}
	s.cache.SetFresh(false)
}
