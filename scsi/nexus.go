package scsi

import "sync/atomic"

// The I_T nexuses a logical unit has seen and what it remembers of each: its pending unit
// attentions, which a command checks before it runs without taking the logical unit's lock.

// nexusState is what the logical unit remembers of one I_T nexus.
type nexusState struct {
	n  *Nexus
	ua uaSet // pending unit attentions
}

// nexusTable maps each I_T nexus seen to its state. The map is copied on write (a new nexus is
// rare) so that the per-command lookup takes no lock; the methods named Locked change it under
// the logical unit's lock.
type nexusTable struct {
	m atomic.Pointer[map[*Nexus]*nexusState]
	// first is the state of one nexus of m, set by the first lookup that finds it empty and
	// cleared when that nexus is forgotten: the nexus of a logical unit that one initiator uses
	// is found without the map lookup, and a second one never writes it, so that initiators on
	// other CPUs do not take the line from each other.
	first atomic.Pointer[nexusState]
}

func (t *nexusTable) init() { t.m.Store(&map[*Nexus]*nexusState{}) }

// lookup returns the state of nexus n, or nil when n is new. It takes no lock.
func (t *nexusTable) lookup(n *Nexus) *nexusState {
	first := t.first.Load()
	if first != nil && first.n == n {
		return first
	}
	if s := (*t.m.Load())[n]; s != nil {
		if first == nil {
			t.first.CompareAndSwap(nil, s)
		}
		return s
	}
	return nil
}

// getLocked returns the state of nexus n, creating it (with the unit attention POWER ON, RESET,
// OR BUS DEVICE RESET OCCURRED pending) on first access.
func (t *nexusTable) getLocked(n *Nexus) *nexusState {
	old := *t.m.Load()
	if s := old[n]; s != nil {
		return s
	}
	s := &nexusState{n: n}
	s.ua.add(ReasonPowerOnResetOrBusDeviceReset)
	m := make(map[*Nexus]*nexusState, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[n] = s
	t.m.Store(&m)
	return s
}

// known reports whether nexus n has been seen.
func (t *nexusTable) known(n *Nexus) bool {
	_, ok := (*t.m.Load())[n]
	return ok
}

// all returns every nexus seen with its state, for reading only.
func (t *nexusTable) all() map[*Nexus]*nexusState { return *t.m.Load() }

// forgetLocked drops nexus n and its state.
func (t *nexusTable) forgetLocked(n *Nexus) {
	old := *t.m.Load()
	if _, ok := old[n]; !ok {
		return
	}
	m := make(map[*Nexus]*nexusState, len(old))
	for k, v := range old {
		if k != n {
			m[k] = v
		}
	}
	t.m.Store(&m)
	if first := t.first.Load(); first != nil && first.n == n {
		t.first.Store(nil)
	}
}

// establishUALocked adds reason for n (nil: all nexuses), skipping except when non-nil.
func (t *nexusTable) establishUALocked(n, except *Nexus, reason Reason) {
	if n != nil {
		t.getLocked(n).ua.add(reason)
		return
	}
	for nx, s := range *t.m.Load() {
		if nx != except {
			s.ua.add(reason)
		}
	}
}
