package srp

import (
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// ioInfo is the session's I/O counters, for SessionIO and Config.SessionForgotten.
func (s *session) ioInfo() SessionIOInfo {
	return SessionIOInfo{InitiatorPortID: s.key.initiator, TargetPortID: s.key.target, LUNMap: s.lunMap.Load(), IO: s.io.Load().snapshot()}
}

// evictable reports whether the session may be forgotten (no channel, no login using it and
// no nexus reset in progress) and since when it has had no channel. registry.mu held.
func (s *session) evictable() (idleSince time.Time, ok bool) {
	if s.logins > 0 {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.channels) > 0 {
		return time.Time{}, false
	}
	if s.resetting != nil {
		select {
		case <-s.resetting:
		default:
			return time.Time{}, false
		}
	}
	return s.idleSince, true
}

// forget drops what the logical units remember of the nexus, once the target has forgotten
// the session to make room for another (Limits.MaxSessions).
func (s *session) forget() {
	if m := s.lunMap.Load(); m != nil {
		m.ForgetNexus(s.nexus)
	}
	s.log.Info("forgot an I_T nexus without channels to make room for a new one (max_sessions)")
	if s.forgotten != nil {
		s.forgotten(s.ioInfo())
	}
}

// newSession makes the session of key, on the SCSI target port of key's target port
// identifier; forgotten (Config.SessionForgotten) hears of it when the target forgets it.
func newSession(key nexusKey, port *scsi.TargetPort, log *zap.Logger, forgotten func(SessionIOInfo)) *session {
	return &session{
		key:           key,
		nexus:         &scsi.Nexus{InitiatorPort: key.initiator.String(), InitiatorID: key.initiator, Port: port},
		log:           log.With(zap.Stringer("initiator", key.initiator)),
		forgotten:     forgotten,
		nexusChannels: nexusChannels{idleSince: time.Now()},
	}
}

// reauthorize applies a new Authorizer to a live session, channel by channel, as LIO and SCST
// decide access per channel: each channel is authorized with its own source address. The
// nexus has one LUN map, that of its oldest channel still admitted; a channel now refused,
// or granted a different map than that one, is disconnected (rather than changing what the
// other channels see).
func (s *session) reauthorize(a Authorizer) {
	chs := s.channelList()
	if len(chs) == 0 {
		return
	}
	var keep *scsi.LUNMap
	for _, ch := range chs {
		var m *scsi.LUNMap
		var err error
		if a != nil {
			m, err = authorizeFrom(a, s.key.initiator, s.key.target, ch.remote, ch.ibSrc)
		}
		switch {
		case a == nil || err != nil || m == nil:
			ch.log.Warn("access revoked by the new configuration: disconnecting the channel", zap.Error(err))
			ch.requestStop(stopHard, "access revoked by configuration reload", iu.TLogoutNoReason)
		case keep == nil:
			keep = m
		case m != keep && !sameMappings(m, keep):
			ch.log.Warn("the new configuration grants this channel's source other LUNs than the nexus's first channel: disconnecting the channel",
				zap.Int("luns", len(m.Mappings())), zap.Int("nexus_luns", len(keep.Mappings())))
			ch.requestStop(stopHard, "access changed by configuration reload", iu.TLogoutNoReason)
		}
	}
	if keep != nil {
		s.switchMap(keep, "configuration reload")
	}
}

// switchMap makes m the session's LUN map. When the logical units the initiator sees through
// it differ from the previous map's (a LUN added or removed, mapped to another logical unit,
// or its read-only flag changed), REPORTED LUNS DATA HAS CHANGED is established for the nexus
// on every logical unit of m, so that the initiator rescans (SPC-4 REPORT LUNS). There is no
// previous map before the first login: that initiator gets POWER ON, RESET, OR BUS DEVICE
// RESET OCCURRED, which covers it. why names the event for the log.
func (s *session) switchMap(m *scsi.LUNMap, why string) {
	// The counters of m's LUNs are there before a command can reach them through m.
	for {
		io := s.io.Load()
		if s.io.CompareAndSwap(io, io.withMap(m)) {
			break
		}
	}
	old := s.lunMap.Swap(m)
	if old == nil || old == m || sameMappings(old, m) {
		return
	}
	m.EstablishUA(s.nexus, scsi.ReasonReportedLUNsDataHasChanged)
	s.log.Info("LUN map changed: REPORTED LUNS DATA HAS CHANGED pending",
		zap.String("by", why), zap.Int("luns_before", len(old.Mappings())), zap.Int("luns", len(m.Mappings())))
}

// channelList returns a snapshot of the live channels.
func (n *nexusChannels) channelList() []*channel {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*channel(nil), n.channels...)
}

func (n *nexusChannels) channelCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.channels)
}

// add registers a live channel.
func (n *nexusChannels) add(ch *channel, src netip.AddrPort) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.channels = append(n.channels, ch)
	n.src = src
	return len(n.channels)
}

// detachAll removes every channel from the session (a SINGLE login replaces them) and returns
// them; their closing will not count as the loss of the nexus.
func (n *nexusChannels) detachAll() []*channel {
	n.mu.Lock()
	defer n.mu.Unlock()
	chs := n.channels
	n.channels = nil
	n.idleSince = time.Now()
	for _, ch := range chs {
		ch.detached.Store(true)
	}
	return chs
}

// remove takes a closing channel out of the session and reports whether it was the last one
// (the nexus is lost). A detached channel was already removed and never is the last.
func (n *nexusChannels) remove(ch *channel) (last bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if i := slices.Index(n.channels, ch); i >= 0 {
		// slices.Delete clears the vacated slot: a closed channel (and its connection)
		// must not stay reachable from the session's array.
		n.channels = slices.Delete(n.channels, i, i+1)
		if len(n.channels) == 0 {
			n.idleSince = time.Now()
			return true
		}
	}
	return false
}

// startReset records a nexus reset in progress and returns the channel to close when done.
func (n *nexusChannels) startReset() chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	done := make(chan struct{})
	n.resetting = done
	return done
}

// waitReset waits for a nexus reset in progress.
func (n *nexusChannels) waitReset() {
	n.mu.Lock()
	done := n.resetting
	n.mu.Unlock()
	if done != nil {
		<-done
	}
}

// sameMappings reports whether two LUN maps show the same logical units at the same LUNs with
// the same access.
func sameMappings(a, b *scsi.LUNMap) bool {
	if a == nil || b == nil {
		return a == b
	}
	am, bm := a.Mappings(), b.Mappings()
	if len(am) != len(bm) {
		return false
	}
	for i := range am {
		if am[i] != bm[i] {
			return false
		}
	}
	return true
}
