package daemon

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

// aclAuthorizer is the srp.Authorizer of one configuration: the ACLs in file order, each with
// the LUN map its initiators see. The first ACL that matches wins. It is immutable; a reload
// builds a new one and installs it with Target.SetAuthorizer.
type aclAuthorizer struct {
	acls []*aclEntry
	// luns are every LUN of the configuration, for the ACL a refusal suggests.
	luns []int
}

type aclEntry struct {
	index      int
	cfg        config.ACL
	initiators []string
	sources    []config.Source
	lunMap     *scsi.LUNMap
}

var (
	_ srp.Authorizer   = (*aclAuthorizer)(nil)
	_ srp.IBAuthorizer = (*aclAuthorizer)(nil)
)

// newACLEntry makes the entry of acls[i] of cfg, its LUN map not yet set.
func newACLEntry(cfg *config.Config, i int) (*aclEntry, *config.Error) {
	c := cfg.ACLs[i]
	e := &aclEntry{index: i, cfg: c, initiators: c.Initiators}
	for _, s := range c.Sources {
		src, err := config.ParseSource(s)
		if err != nil {
			return nil, cfg.ErrorAt(config.At("acls", i, "sources"), "%v", err)
		}
		e.sources = append(e.sources, src)
	}
	return e, nil
}

// matches reports whether the initiator port id (0x + 32 hex digits), or the source address
// of a login through an address listener (unmapped, without zone), or the InfiniBand address
// of one through an ib listener (ibSrc), is in the ACL.
func (e *aclEntry) matches(id string, src netip.Addr, ibSrc *ib.IBAddr) bool {
	for _, p := range e.initiators {
		if config.MatchInitiator(p, id) {
			return true
		}
	}
	for _, s := range e.sources {
		if ibSrc != nil && s.MatchIB(*ibSrc) || ibSrc == nil && src.IsValid() && s.MatchIP(src) {
			return true
		}
	}
	return false
}

// Authorize returns the LUN map of the first matching ACL. An initiator that matches none is
// refused, and the refusal (which the engine logs with the login's details) spells out the ACL
// that would let it in.
func (a *aclAuthorizer) Authorize(initiator, _ iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
	id := initiator.String()
	addr := src.Addr().Unmap().WithZone("")
	for _, e := range a.acls {
		if e.matches(id, addr, nil) {
			return e.lunMap, nil
		}
	}
	return nil, &srp.LoginRefusedError{Reason: iu.LoginRejChannelLimitReached, Detail: a.refusal(id, addr, nil)}
}

// AuthorizeIB is Authorize for a login through an ib listener: the sources that match it are
// the InfiniBand ones (gid:, pkey:).
func (a *aclAuthorizer) AuthorizeIB(initiator, _ iu.PortID, src ib.IBAddr) (*scsi.LUNMap, error) {
	id := initiator.String()
	for _, e := range a.acls {
		if e.matches(id, netip.Addr{}, &src) {
			return e.lunMap, nil
		}
	}
	return nil, &srp.LoginRefusedError{Reason: iu.LoginRejChannelLimitReached, Detail: a.refusal(id, netip.Addr{}, &src)}
}

func (a *aclAuthorizer) refusal(id string, src netip.Addr, ibSrc *ib.IBAddr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "initiator %s", id)
	switch {
	case ibSrc != nil:
		fmt.Fprintf(&b, " from %v", *ibSrc)
	case src.IsValid():
		fmt.Fprintf(&b, " from %s", src)
	}
	if len(a.acls) == 0 {
		b.WriteString(" is refused: the configuration has no ACLs")
	} else {
		fmt.Fprintf(&b, " matches none of the %d ACLs", len(a.acls))
	}
	fmt.Fprintf(&b, "; to let it in, add to acls: {initiators: [\"%s\"], luns: %s}", id, config.FlowList(a.luns))
	switch {
	case ibSrc != nil:
		fmt.Fprintf(&b, " (or sources: [\"gid:%s\"] instead of initiators)", ibSrc.GID)
	case src.IsValid():
		fmt.Fprintf(&b, " (or sources: [\"%s\"] instead of initiators)", src)
	}
	return b.String()
}
