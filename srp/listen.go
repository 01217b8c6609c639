package srp

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// Serve accepts connection requests from l until ctx ends (it returns ctx.Err()), Shutdown is
// called (ErrTargetClosed), or l fails (that error). It may be called for several listeners at
// once. Shutdown closes l; when Serve returns for another reason l stays open.
func (t *Target) Serve(ctx context.Context, l ib.Listener) error {
	t.mu.Lock()
	if t.shutting {
		t.mu.Unlock()
		return ErrTargetClosed
	}
	t.listeners[l] = struct{}{}
	t.serving.Add(1)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.listeners, l)
		t.mu.Unlock()
		t.serving.Done()
	}()
	fam := listenerFamily(l)
	log := t.log.With(zap.Stringer("listener", l.Addr()))
	log.Info("serving SRP logins", zap.String("login_form", loginFormName(fam)))
	for {
		req, err := l.Next(ctx)
		if err != nil {
			t.mu.Lock()
			shutting := t.shutting
			t.mu.Unlock()
			switch {
			case shutting:
				return ErrTargetClosed
			case ctx.Err() != nil:
				return ctx.Err()
			}
			log.Error("listener failed", zap.Error(err))
			return fmt.Errorf("srp: listener %v: %w", l.Addr(), err)
		}
		t.mu.Lock()
		if t.shutting {
			t.mu.Unlock()
			t.rejectShutdown(req, fam)
			return ErrTargetClosed
		}
		select {
		case t.loginSlots <- struct{}{}:
		default:
			// A flood of connection requests: refuse at once rather than pile up handlers
			// (each may wait for a nexus's old channels to close).
			t.mu.Unlock()
			t.rejectBusy(req, fam)
			continue
		}
		t.logins.Add(1)
		t.mu.Unlock()
		go func() {
			defer func() {
				<-t.loginSlots
				t.logins.Done()
			}()
			t.login(req, fam)
		}()
	}
}

// rejectShutdown answers a request that arrived while shutting down.
func (t *Target) rejectShutdown(req ib.ConnRequest, fam ib.Family) {
	var tag iu.Tag
	if f, err := parseLogin(req, fam); err == nil {
		tag = f.Tag
	}
	t.reject(req, tag, iu.LoginRejInsufficientResources, t.log, "target is shutting down", "wait for the target to restart")
}

// rejectBusy answers a request that found every login slot taken.
func (t *Target) rejectBusy(req ib.ConnRequest, fam ib.Family) {
	var tag iu.Tag
	log := t.log.With(srcField(req, fam))
	if f, err := parseLogin(req, fam); err == nil {
		tag = f.Tag
		log = log.With(zap.Stringer("initiator", f.InitiatorPortID))
	}
	t.reject(req, tag, iu.LoginRejInsufficientResources, log,
		fmt.Sprintf("%d logins already in progress (max_logins_in_progress)", t.lim.MaxLoginsInProgress),
		"the initiator retries; if logins arrive this fast legitimately, raise limits.max_logins_in_progress")
}

// listenerFamily returns l's address family (ib.FamilyListener), or 0 when l does not say.
// The family decides the layout of the SRP_LOGIN_REQ (include/scsi/srp.h): an IP-family
// listener receives the 56-byte struct srp_login_req_rdma (RDMA/CM's own header took 36 of the
// IB CM REQ's 92 bytes; LIO converts every RDMA/CM login from this form), an AF_IB listener
// the raw REQ private data, the 64-byte struct srp_login_req first (ib_srp's
// dgid=...,service_id=0x013fPPPP). Not the length of the private data, which is ambiguous
// where the transport delivers the sender's length (iWARP) or pads it.
func listenerFamily(l ib.Listener) ib.Family {
	if fl, ok := l.(ib.FamilyListener); ok {
		return fl.Family()
	}
	return 0
}
