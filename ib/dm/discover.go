package dm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// Exchanger sends a request MAD (to the port being probed) and returns the response with the
// same transaction id, or an error (a timeout, a closed port).
type Exchanger interface {
	Exchange(req MAD) (MAD, error)
}

// Target is one SRP target port found by Discover.
type Target struct {
	Slot      int
	IOCGUID   uint64
	IOClass   uint16
	SendSize  uint32
	IDString  string
	IDExt     string // the 16 characters after "SRP.T10:", as srp_daemon takes them
	ServiceID uint64
}

// Line is the add_target value srp_daemon writes for t behind the port with GID gid, in its
// field order (rdma-core srp_daemon/srp_daemon.c, add_non_exist_target): id_ext, ioc_guid,
// dgid, pkey, service_id, and io_class when it is not SRP rev. 16a's.
func (t Target) Line(gid netip.Addr, pkey uint16) string {
	g := gid.As16()
	s := fmt.Sprintf("id_ext=%s,ioc_guid=%016x,dgid=%016x%016x,pkey=%04x,service_id=%016x",
		t.IDExt, t.IOCGUID, binary.BigEndian.Uint64(g[:8]), binary.BigEndian.Uint64(g[8:]), pkey, t.ServiceID)
	if t.IOClass != IOClassSRP {
		s += fmt.Sprintf(",io_class=%04x", t.IOClass)
	}
	return s
}

// ioClassSRPRev10 is the I/O class of SRP rev. 10 targets, which srp_daemon also accepts.
const ioClassSRPRev10 = 0xff00

// Discoverer sends the Device Management GETs srp_daemon sends to one port (IOUnitInfo, the
// IOControllerProfile of each slot that holds a controller, its ServiceEntries four at a time)
// and returns the SRP targets behind it. TID numbers the requests.
type Discoverer struct {
	Ex  Exchanger
	TID uint64
	// Trace, if set, sees every answer.
	Trace func(attr uint16, mod uint32, rsp MAD)
}

func (d *Discoverer) get(attr uint16, mod uint32) ([]byte, error) {
	d.TID++
	req := make(MAD, MADSize)
	NewRequest(req, ClassDeviceMgmt, 1, MethodGet, attr, mod, d.TID)
	rsp, err := d.Ex.Exchange(req)
	if err != nil {
		return nil, err
	}
	if err := rsp.Check(); err != nil {
		return nil, err
	}
	if d.Trace != nil {
		d.Trace(attr, mod, rsp)
	}
	switch {
	case !SameTID(rsp.TID(), d.TID) || rsp.Method() != MethodGetResp || rsp.AttrID() != attr:
		return nil, fmt.Errorf("dm: answer to GET %s(%#x) has method %#x, attribute %#04x, tid %#x", attrName(attr), mod, rsp.Method(), rsp.AttrID(), rsp.TID())
	case rsp.Status() != StatusOK:
		return nil, &StatusError{Attr: attr, Mod: mod, Status: rsp.Status()}
	}
	return rsp.DMData(), nil
}

// StatusError is an answer with a status other than success.
type StatusError struct {
	Attr   uint16
	Mod    uint32
	Status Status
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("dm: GET %s(%#x): %v", attrName(e.Attr), e.Mod, e.Status)
}

// AttrName names a Device Management attribute.
func AttrName(a uint16) string { return attrName(a) }

func attrName(a uint16) string {
	switch a {
	case AttrClassPortInfo:
		return "ClassPortInfo"
	case AttrIOUnitInfo:
		return "IOUnitInfo"
	case AttrIOCProfile:
		return "IOControllerProfile"
	case AttrSvcEntries:
		return "ServiceEntries"
	}
	return fmt.Sprintf("attribute %#04x", a)
}

// SameTID reports whether a response's transaction id answers a request's: the low 32 bits,
// the requester's own. The kernel's ib_umad puts the sending agent's id in the high 32 bits of
// a request's (drivers/infiniband/core/user_mad.c, ib_umad_write), to find the agent the
// response belongs to.
func SameTID(rsp, req uint64) bool { return uint32(rsp) == uint32(req) }

// Discover returns the SRP targets of the port, in slot and entry order.
func (d *Discoverer) Discover() ([]Target, error) {
	iou, err := d.get(AttrIOUnitInfo, 0)
	if err != nil {
		return nil, err
	}
	u := IOUnitInfo(iou)
	var out []Target
	for slot := 1; slot <= int(u.MaxControllers()) && slot <= 2*(IOUnitInfoSize-4); slot++ {
		if u.Slot(slot) != 1 {
			continue
		}
		pd, err := d.get(AttrIOCProfile, uint32(slot))
		if err != nil {
			return out, err
		}
		p := IOCProfile(pd)
		if p.IOClass() != IOClassSRP && p.IOClass() != ioClassSRPRev10 {
			continue
		}
		n := int(p.NumSvcEntries())
		for lo := 0; lo < n; lo += SvcEntriesPerMAD {
			hi := min(lo+SvcEntriesPerMAD, n) - 1
			sd, err := d.get(AttrSvcEntries, SvcEntriesMod(slot, lo, hi))
			if err != nil {
				return out, err
			}
			for i := 0; i <= hi-lo; i++ {
				e := SvcEntries(sd, i)
				idExt, ok := strings.CutPrefix(e.Name(), ServiceNameSRP)
				if !ok || idExt == "" {
					continue
				}
				out = append(out, Target{Slot: slot, IOCGUID: p.GUID(), IOClass: p.IOClass(), SendSize: p.SendSize(),
					IDString: p.IDString(), IDExt: idExt[:min(len(idExt), 16)], ServiceID: e.ID()})
			}
		}
	}
	return out, nil
}

// NodeRecordRequest writes to m a Subnet Administration GET of the NodeRecord of lid: what
// an initiator asks the subnet manager to learn the port GUID behind a LID.
func NodeRecordRequest(m MAD, lid uint16, tid uint64) {
	NewRequest(m, ClassSubnAdm, 2, MethodGet, AttrNodeRecord, 0, tid)
	m.SetSACompMask(1) // the record's LID
	binary.BigEndian.PutUint16(m.SAData(), lid)
}

// NodeRecordPortGUID reads the port GUID from the answer to NodeRecordRequest (struct
// ib_sa_node_rec: LID, 2 reserved bytes, then NodeInfo, whose port GUID is at 20).
func NodeRecordPortGUID(m MAD) (uint64, error) {
	if err := m.Check(); err != nil {
		return 0, err
	}
	if m.Status() != StatusOK {
		return 0, fmt.Errorf("dm: SA NodeRecord: status %#04x", uint16(m.Status()))
	}
	return binary.BigEndian.Uint64(m.SAData()[4+20:]), nil
}
