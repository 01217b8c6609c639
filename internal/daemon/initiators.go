package daemon

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

// Per-initiator statistics: the sessions' I/O counters (srp.Target.SessionIO), shown per
// session in sessions, luns and stats, and summed for /metrics under bounded labels: the ACL
// that admits the session (its name, or acls[N]) and, for the ACLs with
// per_initiator_metrics, the initiator port, at most config.MaxInitiatorSeries of them.

func newIOCounts(s srp.IOStats) control.IOCounts {
	c := control.IOCounts{Commands: s.Commands, ReadBytes: s.ReadBytes, WrittenBytes: s.WrittenBytes, Errors: s.Errors}
	if !s.LastActive.IsZero() {
		t := s.LastActive.UTC()
		c.LastActive = &t
	}
	return c
}

// aclLabel names the ACL of the running configuration whose LUN map m is: its name or
// acls[N]; "none" for a map no ACL has any more (a session a reload left).
func (a *aclAuthorizer) aclLabel(m *scsi.LUNMap) string {
	if e := a.aclOf(m); e != nil {
		return e.cfg.Label(e.index)
	}
	return "none"
}

// ioKey is one series of the per-initiator metrics.
type ioKey struct {
	acl, initiator string
	lun            uint16
}

// initiatorLabels gives the per-initiator metrics their labels, and keeps what forgotten
// sessions counted (srp.Config.SessionForgotten), so that a sum never goes down when the
// target forgets a session.
type initiatorLabels struct {
	mu sync.Mutex
	// own are the initiators with an initiator label of their own, at most
	// config.MaxInitiatorSeries, kept for the daemon's life so that a series never changes
	// its labels.
	own       map[iu.PortID]bool
	forgotten map[ioKey]srp.IOStats
}

func newInitiatorLabels() *initiatorLabels {
	return &initiatorLabels{own: map[iu.PortID]bool{}, forgotten: map[ioKey]srp.IOStats{}}
}

// labels returns the acl and initiator labels of a session. l.mu held.
func (l *initiatorLabels) labelsLocked(auth *aclAuthorizer, initiator iu.PortID, m *scsi.LUNMap) (acl, init string) {
	e := auth.aclOf(m)
	if e == nil {
		return "none", ""
	}
	acl = e.cfg.Label(e.index)
	if !e.cfg.PerInitiatorMetrics {
		return acl, ""
	}
	if !l.own[initiator] && len(l.own) >= config.MaxInitiatorSeries {
		return acl, "other"
	}
	l.own[initiator] = true
	return acl, initiator.String()
}

// add adds a session's counters to sums under its labels. l.mu held.
func (l *initiatorLabels) addLocked(sums map[ioKey]srp.IOStats, auth *aclAuthorizer, s srp.SessionIOInfo) {
	acl, init := l.labelsLocked(auth, s.InitiatorPortID, s.LUNMap)
	for _, io := range s.IO {
		k := ioKey{acl, init, io.LUN}
		sum := sums[k]
		sum.Add(io.IOStats)
		sums[k] = sum
	}
}

// forget keeps what a session the target forgets counted.
func (l *initiatorLabels) forget(auth *aclAuthorizer, s srp.SessionIOInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(l.forgotten, auth, s)
}

// series sums every session's counters, and the forgotten ones', by label.
func (l *initiatorLabels) series(auth *aclAuthorizer, sessions []srp.SessionIOInfo) map[ioKey]srp.IOStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	sums := make(map[ioKey]srp.IOStats, len(l.forgotten))
	for k, v := range l.forgotten {
		sums[k] = v
	}
	for _, s := range sessions {
		l.addLocked(sums, auth, s)
	}
	return sums
}

// initiatorSeries is the per-initiator metrics of the running daemon.
func (d *daemon) initiatorSeries() map[ioKey]srp.IOStats {
	return d.ioLabels.series(d.authNow.Load(), d.target.SessionIO())
}

// sessionForgotten is srp.Config.SessionForgotten.
func (d *daemon) sessionForgotten(s srp.SessionIOInfo) { d.ioLabels.forget(d.authNow.Load(), s) }

// lunInitiators lists, per LUN number, the counters of each session on it, busiest first.
func lunInitiators(auth *aclAuthorizer, sessions []srp.SessionIOInfo) map[int][]control.InitiatorIO {
	out := map[int][]control.InitiatorIO{}
	for _, s := range sessions {
		acl := auth.aclLabel(s.LUNMap)
		for _, io := range s.IO {
			if io.Commands == 0 {
				continue
			}
			out[int(io.LUN)] = append(out[int(io.LUN)], control.InitiatorIO{Initiator: s.InitiatorPortID.String(), ACL: acl, IOCounts: newIOCounts(io.IOStats)})
		}
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b control.InitiatorIO) int {
			return cmp.Or(cmp.Compare(b.Commands, a.Commands), strings.Compare(a.Initiator, b.Initiator))
		})
	}
	return out
}

// lunTotals are a logical unit's own counters (every initiator) as control.IOCounts.
func lunTotals(lu *scsi.LogicalUnit) control.IOCounts {
	s := lu.StatsSnapshot()
	var c control.IOCounts
	for _, n := range s.Commands {
		c.Commands += n
	}
	for _, n := range s.SenseKeys {
		c.Errors += n
	}
	c.ReadBytes, c.WrittenBytes = s.BytesIn, s.BytesOut
	return c
}

// initiatorStatEntries are the per-session entries of stats: each session's counters summed
// over its LUNs, named initiator_*, with its initiator and ACL (last_active in Unix seconds,
// 0: never).
func (d *daemon) initiatorStatEntries() []control.StatEntry {
	auth := d.authNow.Load()
	var out []control.StatEntry
	for _, s := range d.target.SessionIO() {
		var t srp.IOStats
		for _, io := range s.IO {
			t.Add(io.IOStats)
		}
		who, acl := s.InitiatorPortID.String(), auth.aclLabel(s.LUNMap)
		var last int64
		if !t.LastActive.IsZero() {
			last = t.LastActive.Unix()
		}
		for _, e := range []struct {
			name string
			v    int64
		}{
			{"initiator_commands", int64(t.Commands)},
			{"initiator_read_bytes", int64(t.ReadBytes)},
			{"initiator_written_bytes", int64(t.WrittenBytes)},
			{"initiator_errors", int64(t.Errors)},
			{"initiator_last_active", last},
		} {
			out = append(out, control.StatEntry{Name: e.name, Value: e.v, Initiator: who, ACL: acl})
		}
	}
	return out
}
