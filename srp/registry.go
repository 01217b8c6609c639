package srp

import (
	"fmt"
	"net/netip"
	"time"
)

// init readies r for New's target.
func (r *registry) init(lim *Limits, newSession func(nexusKey) *session) {
	r.lim, r.newSession = lim, newSession
	r.sessions = make(map[nexusKey]*session)
	r.channels = make(map[*channel]struct{})
	r.sources = make(sourceTable)
}

// close refuses channels from now on (addChannel).
func (r *registry) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// channelList returns a snapshot of the live channels.
func (r *registry) channelList() []*channel {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*channel, 0, len(r.channels))
	for ch := range r.channels {
		out = append(out, ch)
	}
	return out
}

// acquireSession returns the session of key for a login from addr, creating it, and counts
// the login, against the source address's share too, until releaseSession. When the target
// has Limits.MaxSessions sessions already, the one without channels for the longest is
// forgotten to make room. It refuses (a non-nil limitRefusal) when every session has channels
// (or a login or reset in progress), or when addr has Limits.MaxSessionsPerSource other
// nexuses with logins or channels.
func (r *registry) acquireSession(key nexusKey, addr netip.Addr) (*session, *source, *limitRefusal) {
	var evicted *session
	defer func() {
		if evicted != nil {
			evicted.forget()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	src := r.sources.get(addr)
	if n := len(src.nexuses); src.nexuses[key] == 0 && n >= r.lim.MaxSessionsPerSource {
		if n == 0 {
			delete(r.sources, addr)
		}
		return nil, nil, sessionsRefusal(addr, n, r.lim.MaxSessionsPerSource)
	}
	s := r.sessions[key]
	if s == nil {
		if len(r.sessions) >= r.lim.MaxSessions {
			if evicted = r.oldestIdleLocked(); evicted == nil {
				if len(src.nexuses) == 0 {
					delete(r.sources, addr)
				}
				return nil, nil, &limitRefusal{
					detail: fmt.Sprintf("the target has %d I_T nexuses with channels (max_sessions %d)", r.lim.MaxSessions, r.lim.MaxSessions),
					hint:   "raise limits.max_sessions, or log out initiators that are no longer used"}
			}
			delete(r.sessions, evicted.key)
		}
		s = r.newSession(key)
		r.sessions[key] = s
	}
	s.logins++
	src.nexuses[key]++
	return s, src, nil
}

// releaseSession ends a login's use of s.
func (r *registry) releaseSession(s *session, src *source) {
	r.mu.Lock()
	s.logins--
	r.sources.unref(src, s.key, false)
	r.mu.Unlock()
}

// oldestIdleLocked returns the evictable session idle for the longest, or nil. r.mu held.
func (r *registry) oldestIdleLocked() *session {
	var oldest *session
	var oldestSince time.Time
	for _, s := range r.sessions {
		since, ok := s.evictable()
		if !ok {
			continue
		}
		if oldest == nil || since.Before(oldestSince) {
			oldest, oldestSince = s, since
		}
	}
	return oldest
}

// reserveChannel counts a channel of nexus key from src about to be set up, against
// Limits.MaxChannelsTotal and src's Limits.MaxChannelsPerSource; it refuses when either is
// reached. addChannel keeps the count for the live channel (removeChannel drops it);
// unreserveChannel drops it when the channel is given up.
func (r *registry) reserveChannel(src *source, key nexusKey) *limitRefusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.channels) + r.chReserved; n >= r.lim.MaxChannelsTotal {
		return &limitRefusal{
			detail: fmt.Sprintf("the target has %d channels (max_channels_total %d)", n, r.lim.MaxChannelsTotal),
			hint:   "raise limits.max_channels_total, or lower ch_count on the initiators"}
	}
	if src.channels >= r.lim.MaxChannelsPerSource {
		return channelsRefusal(src.addr, src.channels, r.lim.MaxChannelsPerSource)
	}
	r.chReserved++
	src.channels++
	src.nexuses[key]++
	return nil
}

func (r *registry) unreserveChannel(src *source, key nexusKey) {
	r.mu.Lock()
	r.chReserved--
	r.sources.unref(src, key, true)
	r.mu.Unlock()
}

// sessionList returns a snapshot of the sessions.
func (r *registry) sessionList() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		out = append(out, s)
	}
	return out
}

// addChannel records a started channel, which takes over its reservation (reserveChannel);
// it fails once the registry is closed (Shutdown), and the reservation stays.
func (r *registry) addChannel(ch *channel) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.channels[ch] = struct{}{}
	r.chReserved--
	r.live.Add(1)
	return true
}

// removeChannel forgets a channel addChannel recorded, and what it counted against its source.
func (r *registry) removeChannel(ch *channel) {
	r.mu.Lock()
	delete(r.channels, ch)
	r.sources.unref(ch.src, ch.sess.key, true)
	r.mu.Unlock()
	r.live.Done()
}

// get returns the record of addr, making it.
func (t sourceTable) get(addr netip.Addr) *source {
	src := t[addr]
	if src == nil {
		src = &source{addr: addr, nexuses: make(map[nexusKey]int)}
		t[addr] = src
	}
	return src
}

// unref drops one reference of key (a login or a channel) and the channel count when channel
// is true, and forgets the source once nothing from it is left.
func (t sourceTable) unref(src *source, key nexusKey, channel bool) {
	if channel {
		src.channels--
	}
	if src.nexuses[key]--; src.nexuses[key] <= 0 {
		delete(src.nexuses, key)
	}
	if len(src.nexuses) == 0 && src.channels == 0 && t[src.addr] == src {
		delete(t, src.addr)
	}
}

// limitRefusal is why a login was refused for a limit of the target or a share of its source
// address (SRP_LOGIN_REJ with INSUFFICIENT RESOURCES), for the log line.
type limitRefusal struct{ detail, hint string }

func sessionsRefusal(addr netip.Addr, n, limit int) *limitRefusal {
	return &limitRefusal{
		detail: fmt.Sprintf("%d I_T nexuses have logins or channels from this source address %v (max_sessions_per_source %d)", n, addr, limit),
		hint:   "log out nexuses this host no longer uses, or raise limits.max_sessions_per_source",
	}
}

func channelsRefusal(addr netip.Addr, n, limit int) *limitRefusal {
	return &limitRefusal{
		detail: fmt.Sprintf("%d channels are open from this source address %v (max_channels_per_source %d)", n, addr, limit),
		hint:   "lower ch_count on the initiator, or raise limits.max_channels_per_source",
	}
}
