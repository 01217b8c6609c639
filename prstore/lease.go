package prstore

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// The lease: how long this gateway trusts its cache after a read found it current, renewed
// every Lease/4, and what ends it.

// margin covers timer lateness and clock rate differences over a lease.
func margin(lease time.Duration) time.Duration { return lease/10 + 100*time.Millisecond }

// renewals renews the lease every Lease/4 until Close.
func (s *Store) renewals() {
	defer s.done.Done()
	t := time.NewTicker(s.opts.Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.renew()
	}
}

// renew reads the version, checking membership in the same read, and grants a lease from the
// time the read was sent when the cache is current (after applying a newer version).
func (s *Store) renew() {
	sent := time.Now()
	s.mu.Lock()
	rec := s.record
	s.mu.Unlock()
	vals, err := s.obj.ReadOmap([]string{keyVersion}, map[string][]byte{s.key: rec})
	switch {
	case errors.Is(err, rbd.ErrCompare):
		s.log.Warn("persistent reservations: this gateway was evicted (it missed a change for longer than its lease); registering again")
		s.lapseNow()
		if err := s.register(); err != nil {
			s.log.Error("persistent reservations: registering again failed", zap.Error(err))
		}
		return // the next renewal grants a lease
	case err != nil:
		s.log.Debug("persistent reservations: lease renewal failed", zap.Error(err))
		return
	}
	v, err := decodeVersion(vals[keyVersion])
	if err != nil {
		s.log.Error("persistent reservations: the shared state's version cannot be read", zap.Error(err))
		return
	}
	if s.cache.Version() < v {
		if err := s.refresh(); err != nil {
			s.log.Warn("persistent reservations: loading the shared state failed", zap.Error(err))
			return
		}
	}
	if s.cache.Version() < v {
		return
	}
	s.grant(sent)
}

// grant marks the cache fresh until Lease after sent, less the margin, unless that is past.
func (s *Store) grant(sent time.Time) {
	until := sent.Add(s.opts.Lease - margin(s.opts.Lease))
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	d := time.Until(until)
	if d <= 0 {
		return
	}
	s.leaseGen++
	gen := s.leaseGen
	if s.lapse != nil {
		s.lapse.Stop()
	}
	s.lapse = time.AfterFunc(d, func() {
		s.freshMu.Lock()
		defer s.freshMu.Unlock()
		if s.leaseGen == gen {
			s.log.Warn("persistent reservations: the lease lapsed (the shared state could not be read in time); commands that a reservation could conflict with fail until it is renewed")
			s.cache.SetFresh(false)
		}
	})
	s.cache.SetFresh(true)
}

// lapseNow ends the lease at once.
func (s *Store) lapseNow() {
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	s.leaseGen++
	if s.lapse != nil {
		s.lapse.Stop()
	}
	s.cache.SetFresh(false)
}
