package scsi

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
)

// PRStore keeps the reservations of a logical unit that several device servers serve: two
// gateways in front of one Ceph RBD image, each with its own target ports, are one logical unit
// to the initiators, so a registration or reservation made through one holds through the other.
// The store holds one serialized state with a version; each device server caches it, checks
// commands against its cache, and changes it only by compare-and-write, so that two changes
// made at once through two device servers never both win.
//
// The store's driver keeps each cache current: it calls Reservations.Apply with every newer
// version it learns of (a notification from the device server that stored it, or its own
// polling), and Reservations.SetFresh(false) as soon as it cannot be sure the cache is current
// (the store is unreachable, its lease lapsed). A stale cache fails every command a
// reservation could conflict with (fail closed), until SetFresh(true).
type PRStore interface {
	// Load returns the stored state and its version; no state yet is nil data and version 0.
	Load() (data []byte, version uint64, err error)
	// Commit stores data as version old+1 if the stored version is still old, and reports
	// whether it did: false means another device server stored a newer version first.
	Commit(old uint64, data []byte) (stored bool, err error)
	// Publish returns once every other device server has applied version v (their Apply
	// returned), or once any that did not can no longer act on an older version (it has
	// fenced itself: its lease lapsed and its commands in flight have ended).
	Publish(v uint64) error
}

// prMaxCommitAttempts bounds the compare-and-write retries of one change: each conflict means
// another device server's change went in, so the loop makes progress.
const prMaxCommitAttempts = 32

// prEvent is one stored change's effect on I_T nexuses: the unit attentions it established
// and, for PREEMPT AND ABORT, the registrations whose commands it aborts. Every device server
// applies it to the I_T nexuses it serves (applyPREffects) when it learns of the change.
type prEvent struct {
	version uint64
	from    ITNexusID
	eff     prEffects
}

// prMaxEvents bounds the changes whose effects are kept with the state: a device server that
// missed more (it was cut off meanwhile) works out its unit attentions from the states
// (diffEffects).
const prMaxEvents = 16

// NewSharedReservations makes reservations kept in store, starting from its current state.
// They are stale (SetFresh) until the store's driver says otherwise.
func NewSharedReservations(store PRStore) (*Reservations, error) {
	data, v, err := store.Load()
	if err != nil {
		return nil, fmt.Errorf("persistent reservations: loading the shared state: %w", err)
	}
	s, events, err := unmarshalShared(data)
	if err != nil {
		return nil, err
	}
	s.stale = true
	s.settle()
	r := &Reservations{store: store, version: v, events: events}
	r.initShared()
	r.state.Store(s)
	return r, nil
}

// initShared makes what shared reservations track of the versions being applied.
func (r *Reservations) initShared() {
	r.applying = make(map[uint64]struct{})
	r.applied = sync.NewCond(&r.mu)
}

// Shared reports whether the reservations live in a PRStore.
func (r *Reservations) Shared() bool { return r.store != nil }

// Version returns the stored version that is in force with the effects of every change up to
// it applied to this device server's I_T nexuses (0 for reservations that are not shared): what
// the store acknowledges to the device server that made a change.
func (r *Reservations) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appliedLocked()
}

// appliedLocked is Version with mu held: the version in force, less those whose effects are
// still being applied (applying).
func (r *Reservations) appliedLocked() uint64 {
	v := r.version
	for a := range r.applying {
		v = min(v, a-1)
	}
	return v
}

// doneApplying records that the effects of version v are applied.
func (r *Reservations) doneApplying(vs ...uint64) {
	if len(vs) == 0 {
		return
	}
	r.mu.Lock()
	for _, v := range vs {
		delete(r.applying, v)
	}
	r.mu.Unlock()
	r.applied.Broadcast()
}

// persistable reports whether APTPL can be honoured (PTPL_C): a state file, or a shared store,
// which outlives every device server.
func (r *Reservations) persistable() bool { return r.persist != nil || r.store != nil }

// attach makes lu the logical unit that other device servers' changes reach.
func (r *Reservations) attach(lu *LogicalUnit) { r.lu.Store(lu) }

// SetFresh says whether the cached state is known current. While it is not, every command
// that a reservation could conflict with fails with LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT
// IN UNAVAILABLE STATE: a multipath initiator then uses a path through another device server,
// which does know the current reservations.
func (r *Reservations) SetFresh(fresh bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.state.Load()
	if old.stale == !fresh {
		return
	}
	s := old.clone()
	s.stale = !fresh
	s.settle()
	r.state.Store(s)
}

// Fresh reports whether the state is known current (always, for reservations not shared).
func (r *Reservations) Fresh() bool { return !r.state.Load().stale }

// Apply puts version v of the shared state (data, as stored) in force if it is newer than the
// cached one, and gives the I_T nexuses of this device server the unit attentions and aborts of
// the changes in between. It returns once they are done, and those of the versions before that
// another goroutine is applying: the driver then acknowledges the change to the device server
// that made it (Publish).
func (r *Reservations) Apply(data []byte, v uint64) error {
	r.mu.Lock()
	evs, inForce, err := r.applyLocked(data, v)
	r.mu.Unlock()
	if inForce {
		r.applyEvents(evs, nil)
		r.doneApplying(v)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.appliedLocked() < min(v, r.version) {
		r.applied.Wait()
	}
	return err
}

// applyLocked puts version v in force and returns the events to apply; mu is held. A version it
// puts in force is applying until the caller, once it applied the events, calls doneApplying.
func (r *Reservations) applyLocked(data []byte, v uint64) (evs []prEvent, inForce bool, err error) {
	if v <= r.version {
		return nil, false, nil
	}
	s, events, err := unmarshalShared(data)
	if err != nil {
		return nil, false, fmt.Errorf("persistent reservations: version %d: %w", v, err)
	}
	old := r.state.Load()
	complete := len(events) > 0 && events[0].version <= r.version+1
	for _, e := range events {
		if e.version > r.version && e.version <= v {
			evs = append(evs, e)
		}
	}
	if !complete {
		// Changes were missed whose effects are no longer kept: work them out.
		evs = []prEvent{{version: v, eff: diffEffects(old, s)}}
	}
	s.stale = old.stale
	s.settle()
	r.state.Store(s)
	r.version, r.events = v, events
	r.applying[v] = struct{}{}
	return evs, true, nil
}

// diffEffects are the unit attentions of going from state old to s when the changes in
// between are not known: registrations that went were preempted, the registrants left
// lose a reservation that changed, and every I_T nexus hears of changed access states.
func diffEffects(old, s *prState) prEffects {
	eff := prEffects{alua: !slices.Equal(old.alua, s.alua)}
	for _, r := range old.regs {
		if !s.hasRegistration(r) {
			eff.ua = append(eff.ua, prUA{r, ReasonRegistrationsPreempted})
		}
	}
	if old.resType != 0 && (s.resType != old.resType || old.holder() >= 0 && s.holder() >= 0 && old.regs[old.holder()].ITNexusID != s.regs[s.holder()].ITNexusID) {
		for _, r := range s.regs {
			eff.ua = append(eff.ua, prUA{r, ReasonReservationsReleased})
		}
	}
	return eff
}

// hasRegistration reports whether s has registration r (its key aside).
func (s *prState) hasRegistration(r PRRegistration) bool {
	for i := range s.regs {
		if s.regs[i].ITNexusID == r.ITNexusID && s.regs[i].AllTargetPorts == r.AllTargetPorts {
			return true
		}
	}
	return false
}

// applyEvents gives the I_T nexuses of the attached logical unit the effects of other device
// servers' changes. c, when not nil, is the command applying them, which no abort waits for
// (it would wait for itself).
func (r *Reservations) applyEvents(evs []prEvent, c *Command) {
	lu := r.lu.Load()
	if lu == nil {
		return
	}
	for i := range evs {
		lu.applyPREffects(c, evs[i].from, &evs[i].eff)
	}
}

// prChange is the outcome of Reservations.change.
type prChange struct {
	eff prEffects // what the change does to other I_T nexuses, for the caller to apply
	// ok is false when the change could not be put in force (persisting or storing failed,
	// err says why when known); the state is then the one before it.
	ok  bool
	err error
	// version is the shared version the change made (0: none), to publish once its effects
	// are applied.
	version uint64
}

// change changes the reservations: f gets a copy of the state and says whether it changed it
// (failing its command where it refuses). persist says whether the change is one APTPL keeps.
// For reservations that are not shared the change is persisted first when APTPL asks for it;
// shared ones store it as the next version, and when another device server stored one first,
// apply that one and run f again on it.
func (r *Reservations) change(c *Command, from ITNexusID, persist bool, f func(s *prState, eff *prEffects) bool) prChange {
	r.mu.Lock()
	if r.store == nil {
		defer r.mu.Unlock()
		old, s, ch, changed := r.tryChange(f)
		if !changed {
			return ch
		}
		ch.ok = r.commitLocal(old, s, persist)
		if !ch.ok {
			ch.eff = prEffects{}
		}
		return ch
	}
	var learned []prEvent
	var learnedVersions []uint64
	defer func() { // after the unlock below, which runs first
		r.applyEvents(learned, c)
		r.doneApplying(learnedVersions...)
	}()
	defer r.mu.Unlock()
	for range prMaxCommitAttempts {
		_, s, ch, changed := r.tryChange(f)
		if !changed {
			return ch
		}
		s.settle()
		v := r.version + 1
		events := append(slices.Clone(r.events), prEvent{version: v, from: from, eff: ch.eff})
		if len(events) > prMaxEvents {
			events = events[len(events)-prMaxEvents:]
		}
		stored, err := r.store.Commit(r.version, marshalShared(s, events))
		if err != nil {
			return prChange{err: err}
		}
		if stored {
			r.state.Store(s)
			r.version, r.events = v, events
			ch.ok, ch.version = true, v
			return ch
		}
		data, nv, err := r.store.Load()
		if err != nil {
			return prChange{err: err}
		}
		evs, inForce, err := r.applyLocked(data, nv)
		if err != nil {
			return prChange{err: err}
		}
		if inForce {
			learnedVersions = append(learnedVersions, nv)
		}
		learned = append(learned, evs...)
	}
	return prChange{}
}

// tryChange runs f on s, a copy of the state in force (old). changed false: f refused or found
// nothing to change, and ch, ok, is the answer to give.
func (r *Reservations) tryChange(f func(s *prState, eff *prEffects) bool) (old, s *prState, ch prChange, changed bool) {
	old = r.state.Load()
	s = old.clone()
	if !f(s, &ch.eff) {
		ch.ok = true
		return old, s, ch, false
	}
	return old, s, ch, true
}

// fail ends c with what keeps a change from being put in force: the store did not answer in
// time (LOGICAL UNIT COMMUNICATION TIME-OUT, as for the RBD image's own I/O), or anything else
// (INTERNAL TARGET FAILURE).
func (ch *prChange) fail(c *Command) {
	if errors.Is(ch.err, syscall.ETIMEDOUT) {
		c.fail(ReasonLogicalUnitCommunicationTimeout)
		return
	}
	c.fail(ReasonInternalTargetFailure)
}

// commitLocal publishes s, persisting it first when APTPL is (or was) in force and persist
// says the change is one it keeps. It returns false when persisting failed: the old state stays
// in force.
func (r *Reservations) commitLocal(old, s *prState, persist bool) bool {
	s.settle()
	if persist && r.persist != nil && (s.aptpl || old.aptpl) {
		var data []byte
		if s.aptpl {
			data = marshalPRState(s)
		}
		if err := r.persist(data); err != nil {
			return false
		}
	}
	r.state.Store(s)
	return true
}

// prAnnouncer is a PRStore that can tell the other device servers of a version without
// waiting for their acknowledgements.
type prAnnouncer interface {
	Announce(v uint64)
}

// announce tells the other device servers of the change's version and returns at once, where
// the store can (prAnnouncer), for a change that fences nothing: the asymmetric access states
// (aluashare.go). A device server that misses the notification learns the version from its
// next renewal, or fails closed when its lease ends. Elsewhere it is publish.
func (r *Reservations) announce(ch prChange) {
	if ch.version == 0 {
		return
	}
	if a, ok := r.store.(prAnnouncer); ok {
		a.Announce(ch.version)
		return
	}
	r.publish(ch)
}

// publish waits until the other device servers have the change's version (PRStore.Publish).
// Its effects on this device server's I_T nexuses must be applied first.
func (r *Reservations) publish(ch prChange) {
	if ch.version != 0 {
		_ = r.store.Publish(ch.version) // it always ends, acknowledged or fenced by its bound
	}
}
