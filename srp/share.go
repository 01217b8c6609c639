package srp

import (
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
