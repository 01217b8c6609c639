package srp

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// Per-initiator I/O statistics: each session counts, per LUN, the commands answered, the bytes
// moved each way, the CHECK CONDITION answers and when it was last active. The counters are
// the session's (its channels add to them with atomic adds: no lock, no allocation per
// command), made when its LUN map is set, off the I/O path; readers sum them as they wish
// (per session, per initiator, per ACL).

// IOStats are I/O counters: of a session on one LUN, or summed.
type IOStats struct {
	// Commands are the commands answered (their SRP_RSP posted), Errors those answered with
	// CHECK CONDITION.
	Commands, Errors uint64
	// ReadBytes is data-in (sent to the initiator), WrittenBytes data-out (received from it).
	ReadBytes, WrittenBytes uint64
	// LastActive is when the session last answered a command, to within the channel's clock
	// reads (at most Limits.RDMATimeout/8 late); zero when it answered none.
	LastActive time.Time
}

// Add adds o's counters to s, and keeps the later LastActive.
func (s *IOStats) Add(o IOStats) {
	s.Commands += o.Commands
	s.Errors += o.Errors
	s.ReadBytes += o.ReadBytes
	s.WrittenBytes += o.WrittenBytes
	if o.LastActive.After(s.LastActive) {
		s.LastActive = o.LastActive
	}
}

// LUNIOStats are a session's counters on one LUN.
type LUNIOStats struct {
	LUN uint16
	IOStats
}

// ioCounters are the counters of one session on one LUN.
type ioCounters struct {
	commands, errors, readBytes, writtenBytes atomic.Uint64
	// lastActive is in Unix nanoseconds.
	lastActive atomic.Int64
}

func (c *ioCounters) snapshot() IOStats {
	s := IOStats{Commands: c.commands.Load(), Errors: c.errors.Load(), ReadBytes: c.readBytes.Load(), WrittenBytes: c.writtenBytes.Load()}
	if ns := c.lastActive.Load(); ns != 0 {
		s.LastActive = time.Unix(0, ns)
	}
	return s
}

// sessionIO is the counters of a session per LUN number: every LUN any of its LUN maps had,
// so that a reload that takes a LUN away does not lose what was counted there. It never
// changes once published (session.io); a new map publishes a new one holding the same
// counters.
type sessionIO struct {
	low  [256]*ioCounters // LUNs below 256, what Linux uses, by an array load
	high map[uint16]*ioCounters
}

// lookup returns the counters of LUN n, or nil.
func (io *sessionIO) lookup(n uint16) *ioCounters {
	if n < 256 {
		return io.low[n]
	}
	return io.high[n]
}

// withMap returns io (nil: none yet) with counters for every LUN of m too.
func (io *sessionIO) withMap(m *scsi.LUNMap) *sessionIO {
	next := &sessionIO{high: map[uint16]*ioCounters{}}
	if io != nil {
		next.low = io.low
		for n, c := range io.high {
			next.high[n] = c
		}
	}
	for _, mp := range m.Mappings() {
		if next.lookup(mp.LUN) != nil {
			continue
		}
		if mp.LUN < 256 {
			next.low[mp.LUN] = &ioCounters{}
		} else {
			next.high[mp.LUN] = &ioCounters{}
		}
	}
	return next
}

// snapshot lists the counters of every LUN, in LUN order.
func (io *sessionIO) snapshot() []LUNIOStats {
	if io == nil {
		return nil
	}
	var out []LUNIOStats
	for n, c := range io.low {
		if c != nil {
			out = append(out, LUNIOStats{LUN: uint16(n), IOStats: c.snapshot()})
		}
	}
	for n, c := range io.high {
		out = append(out, LUNIOStats{LUN: n, IOStats: c.snapshot()})
	}
	slices.SortFunc(out, func(a, b LUNIOStats) int { return int(a.LUN) - int(b.LUN) })
	return out
}

// SessionIOInfo is the I/O counters of one session (I_T nexus), with or without channels.
type SessionIOInfo struct {
	InitiatorPortID, TargetPortID iu.PortID
	// LUNMap is the session's LUN map (the Authorizer's last answer).
	LUNMap *scsi.LUNMap
	IO     []LUNIOStats
}
