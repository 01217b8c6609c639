package prstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// A change made known: the notify that the members acknowledge once they applied it, the wait
// for those that do not, their eviction, and the applying of what others announce.

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
