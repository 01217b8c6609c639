package srp

import (
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// IBAuthorizer is implemented by Authorizers that also decide on InfiniBand sources. A login
// that arrived on an AF_IB listener (ib.FamilyIB) comes from a GID and a P_Key, not from an IP
// address: the target asks AuthorizeIB, with the same rules for the result as Authorize. An
// Authorizer without it is asked Authorize with the zero address, so that an IP source rule
// can never match a GID written in IPv6 notation.
type IBAuthorizer interface {
	AuthorizeIB(initiator, target iu.PortID, src ib.IBAddr) (*scsi.LUNMap, error)
}

// ibSource returns the InfiniBand address of a request that arrived on a listener of family
// fam, or nil when it came from an IP address.
func ibSource(req ib.ConnRequest, fam ib.Family) *ib.IBAddr {
	if fam != ib.FamilyIB {
		return nil
	}
	if ia, ok := req.(ib.IBAddresser); ok {
		a := ia.RemoteIB()
		return &a
	}
	return &ib.IBAddr{GID: req.RemoteAddr().Addr()}
}

// authorizeFrom asks a for the LUN map of a login or channel from remote, or from ibSrc when
// it is set (an AF_IB listener's).
func authorizeFrom(a Authorizer, initiator, target iu.PortID, remote netip.AddrPort, ibSrc *ib.IBAddr) (*scsi.LUNMap, error) {
	if ibSrc == nil {
		return a.Authorize(initiator, target, remote)
	}
	if ia, ok := a.(IBAuthorizer); ok {
		return ia.AuthorizeIB(initiator, target, *ibSrc)
	}
	return a.Authorize(initiator, target, netip.AddrPort{})
}

// srcField is the log field that names where a request came from.
func srcField(req ib.ConnRequest, fam ib.Family) zap.Field {
	if s := ibSource(req, fam); s != nil {
		return zap.Stringer("src", *s)
	}
	return zap.Stringer("src", req.RemoteAddr())
}

// sourceName names the source of a request for a hint: its address or its GID.
func sourceName(req ib.ConnRequest, fam ib.Family) string {
	if s := ibSource(req, fam); s != nil {
		return fmt.Sprintf("GID %v", s.GID)
	}
	return fmt.Sprintf("address %v", req.RemoteAddr().Addr())
}
