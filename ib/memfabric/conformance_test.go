package memfabric

import (
	"context"
	"sync"
	"testing"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// suiteFabric runs package ib's conformance suite on a fresh in-memory fabric per connection.
type suiteFabric struct{ async bool }

func (s suiteFabric) Connect(t *testing.T, caps func(ib.DeviceLimits) ib.QPCaps) *ibtest.Pair {
	t.Helper()
	return s.connect(t, newEnv(t, Options{Async: s.async}), caps, nil)
}

// sharedSuite runs the shared-queue cases: every connection of a test to one target node.
type sharedSuite struct {
	suiteFabric
	mu   sync.Mutex
	envs map[*testing.T]*env
}

func (s *sharedSuite) env(t *testing.T) *env {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.envs[t]
	if e == nil {
		e = newEnv(t, Options{Async: s.async})
		s.envs[t] = e
		t.Cleanup(func() {
			s.mu.Lock()
			delete(s.envs, t)
			s.mu.Unlock()
		})
	}
	return e
}

func (s *sharedSuite) TargetQueues(t *testing.T) ib.SharedQueues {
	return s.env(t).target.PD().(ib.SharedQueues)
}

func (s *sharedSuite) ConnectShared(t *testing.T, caps func(ib.DeviceLimits) ib.QPCaps, share func(*ib.AcceptParams)) *ibtest.Pair {
	t.Helper()
	return s.connect(t, s.env(t), caps, share)
}

func (s suiteFabric) connect(t *testing.T, e *env, caps func(ib.DeviceLimits) ib.QPCaps, share func(*ib.AcceptParams)) *ibtest.Pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cp := srpConnect()
	cp.QP = caps(e.f.opts.Limits)
	ch := e.dialAsync(ctx, []byte("login-req"), cp)
	req := e.next(t)
	ap := srpAccept()
	ap.QP = caps(req.Limits())
	tc, ic := ibtest.Establish(t, req, ap, share, func() (ib.Conn, error) {
		r := <-ch
		return r.c, r.err
	})
	return &ibtest.Pair{T: tc, I: ic, TPD: e.target.PD(), IPD: e.initiator.PD(), Limits: req.Limits()}
}

// Memory is Go heap memory: the fabric takes any.
func (suiteFabric) Memory(_ *testing.T, n int) []byte { return make([]byte, n) }

func TestConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ibtest.Run(t, suiteFabric{async: m.async})
			ibtest.RunShared(t, &sharedSuite{suiteFabric: suiteFabric{async: m.async}, envs: map[*testing.T]*env{}})
		})
	}
}
