package srp

import (
	"fmt"
	"net/netip"
	"sync/atomic"
)

// Shares: what one initiator may hold of what every initiator of the target shares. An
// initiator is counted twice, as its I_T nexus (a session: all its channels, whatever their
// number) and as its source address (all sessions from one host: initiator port identifiers
// are free to forge, addresses less so), and each count has its own bound:
//
//	resource               per session                per source address
//	data buffers           Limits.MaxInitiatorBuffer  Limits.MaxInitiatorBuffer
//	sessions (nexuses)     -                          Limits.MaxSessionsPerSource
//	channels               Limits.MaxChannels         Limits.MaxChannelsPerSource
//
// So one host that opens many channels, or many forged nexuses, takes at most its share, and
// the rest stays for the others: with the defaults (a quarter of each), four hosts at their
// bounds are needed to exhaust the target.

// bufShare counts the data-buffer bytes one initiator holds, against Limits.MaxInitiatorBuffer.
// Channels of one session (and of one source address) take from it concurrently: it is an
// atomic counter, no lock.
type bufShare struct{ inUse atomic.Int64 }

// take adds n bytes to the share and reports whether that keeps it within limit; if not, the
// share is left as it was. An initiator holding nothing may always take one command's
// buffers, so that no command waits for ever for a share smaller than itself.
func (s *bufShare) take(n, limit int64) bool {
	if h := s.inUse.Add(n); h > limit && h != n {
		s.inUse.Add(-n)
		return false
	}
	return true
}

// give returns n bytes taken.
func (s *bufShare) give(n int64) { s.inUse.Add(-n) }

// source is one initiator host, by source address (its GID for a login on an AF_IB listener,
// written as an IPv6 address): the logins and channels it has, and the
// data buffers they hold. Target.mu guards everything but buf.
type source struct {
	addr netip.Addr
	// nexuses counts, per I_T nexus, the logins in progress and the channels reserved or
	// live from this address: a nexus counts against Limits.MaxSessionsPerSource while it
	// has either.
	nexuses  map[nexusKey]int
	channels int // channels reserved or live
	buf      bufShare
}

// sourceLocked returns the record of addr, making it. t.mu held.
func (t *Target) sourceLocked(addr netip.Addr) *source {
	src := t.sources[addr]
	if src == nil {
		src = &source{addr: addr, nexuses: make(map[nexusKey]int)}
		t.sources[addr] = src
	}
	return src
}

// unrefLocked drops one reference of key (a login or a channel) and the channel count when
// channel is true, and forgets the source once nothing from it is left. t.mu held.
func (t *Target) unrefLocked(src *source, key nexusKey, channel bool) {
	if channel {
		src.channels--
	}
	if src.nexuses[key]--; src.nexuses[key] <= 0 {
		delete(src.nexuses, key)
	}
	if len(src.nexuses) == 0 && src.channels == 0 && t.sources[src.addr] == src {
		delete(t.sources, src.addr)
	}
}

// shareRefusal is why a login was refused for the share of its source address, for the
// SRP_LOGIN_REJ's log line.
type shareRefusal struct{ detail, hint string }

func sessionsRefusal(addr netip.Addr, n, limit int) *shareRefusal {
	return &shareRefusal{
		detail: fmt.Sprintf("%d I_T nexuses have logins or channels from this source address %v (max_sessions_per_source %d)", n, addr, limit),
		hint:   "log out nexuses this host no longer uses, or raise limits.max_sessions_per_source",
	}
}

func channelsRefusal(addr netip.Addr, n, limit int) *shareRefusal {
	return &shareRefusal{
		detail: fmt.Sprintf("%d channels are open from this source address %v (max_channels_per_source %d)", n, addr, limit),
		hint:   "lower ch_count on the initiator, or raise limits.max_channels_per_source",
	}
}
