package srp

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/scsi"
)

// nexusKey identifies an I_T nexus: (initiator port identifier, target port identifier).
type nexusKey struct {
	initiator, target PortID
}

// session is one I_T nexus. It outlives its channels: the scsi.Nexus pointer must stay the same
// across relogins so that unit attentions (I_T NEXUS LOSS OCCURRED, REPORTED LUNS DATA HAS
// CHANGED) reach the initiator when it comes back.
type session struct {
	t      *Target
	key    nexusKey
	nexus  *scsi.Nexus
	log    *zap.Logger
	lunMap atomic.Pointer[scsi.LUNMap]

	// loginMu serialises logins of this nexus (a SINGLE login tears down the others).
	loginMu sync.Mutex

	mu       sync.Mutex
	channels []*channel // live channels, in login order
	src      netip.AddrPort
	// resetting is closed when the nexus reset that followed the loss of the last channel is
	// done; a login waits for it, so that a reset meant for the old channels' commands cannot
	// abort the new ones.
	resetting chan struct{}
}

// startReset records a nexus reset in progress and returns the channel to close when done.
func (s *session) startReset() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := make(chan struct{})
	s.resetting = done
	return done
}

// waitReset waits for a nexus reset in progress.
func (s *session) waitReset() {
	s.mu.Lock()
	done := s.resetting
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

func newSession(t *Target, key nexusKey) *session {
	return &session{
		t:     t,
		key:   key,
		nexus: &scsi.Nexus{InitiatorPort: key.initiator.String(), Port: t.port},
		log:   t.log.With(zap.Stringer("initiator", key.initiator)),
	}
}

// channelList returns a snapshot of the live channels.
func (s *session) channelList() []*channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*channel(nil), s.channels...)
}

func (s *session) channelCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.channels)
}

// add registers a live channel.
func (s *session) add(ch *channel, src netip.AddrPort) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels = append(s.channels, ch)
	s.src = src
	return len(s.channels)
}

// detachAll removes every channel from the session (a SINGLE login replaces them) and returns
// them; their closing will not count as the loss of the nexus.
func (s *session) detachAll() []*channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	chs := s.channels
	s.channels = nil
	for _, ch := range chs {
		ch.detached.Store(true)
	}
	return chs
}

// remove takes a closing channel out of the session and reports whether it was the last one
// (the nexus is lost). A detached channel was already removed and never is the last.
func (s *session) remove(ch *channel) (last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.channels {
		if x == ch {
			s.channels = append(s.channels[:i], s.channels[i+1:]...)
			return len(s.channels) == 0
		}
	}
	return false
}

// reauthorize applies a new Authorizer to a live session.
func (s *session) reauthorize(a Authorizer) {
	s.mu.Lock()
	n, src := len(s.channels), s.src
	s.mu.Unlock()
	if n == 0 {
		return
	}
	var m *scsi.LUNMap
	var err error
	if a != nil {
		m, err = a.Authorize(s.key.initiator, s.key.target, src)
	}
	if a == nil || err != nil || m == nil {
		s.log.Warn("access revoked by the new configuration: disconnecting the session",
			zap.Int("channels", n), zap.Error(err))
		for _, ch := range s.channelList() {
			ch.requestStop(stopHard, "access revoked by configuration reload", TLogoutNoReason)
		}
		return
	}
	s.switchMap(m, "configuration reload")
}

// switchMap makes m the session's LUN map. When the logical units the initiator sees through
// it differ from the previous map's (a LUN added or removed, mapped to another logical unit,
// or its read-only flag changed), REPORTED LUNS DATA HAS CHANGED is established for the nexus
// on every logical unit of m, so that the initiator rescans (SPC-4 REPORT LUNS). There is no
// previous map before the first login: that initiator gets POWER ON, RESET, OR BUS DEVICE
// RESET OCCURRED, which covers it. why names the event for the log.
func (s *session) switchMap(m *scsi.LUNMap, why string) {
	old := s.lunMap.Swap(m)
	if old == nil || old == m || sameMappings(old, m) {
		return
	}
	m.EstablishUA(s.nexus, scsi.ReasonReportedLUNsDataHasChanged)
	s.log.Info("LUN map changed: REPORTED LUNS DATA HAS CHANGED pending",
		zap.String("by", why), zap.Int("luns_before", len(old.Mappings())), zap.Int("luns", len(m.Mappings())))
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
