package dm

import (
	"errors"
	"fmt"
)

// Agent answers Device Management GETs for an SRP target: an I/O unit whose slots 1..len(IOCs)
// hold one I/O controller each, every controller with the services (SRP target ports) that
// share its ioc_guid. It answers as the kernel's LIO ib_srpt does (srpt_mad_recv_handler and
// srpt_mgmt_method_get in drivers/infiniband/ulp/srpt/ib_srpt.c): GetResp with the request's
// transaction id and attribute, status 0 and the attribute, or a status saying what is wrong.
type Agent struct {
	IOCs    []IOC
	Profile Profile
}

// IOC is one I/O controller: its GUID (what srp_daemon writes as ioc_guid) and services.
type IOC struct {
	GUID     uint64
	Services []Service
}

// Service is one SRP target port: its id_ext, which the service name carries
// ("SRP.T10:" and 16 hex digits), and the service ID an initiator connects to.
type Service struct {
	IDExt     uint64
	ServiceID uint64
}

// Profile is what every IOControllerProfile of the agent says besides the GUID and the number
// of services: the HCA's identifiers, and the target's limits an initiator may use (srp_daemon
// turns SendSize into max_it_iu_size when it must).
type Profile struct {
	VendorID, DeviceID uint32
	DeviceVersion      uint16
	SendQueueDepth     uint16
	SendSize, RDMASize uint32
	IDString           string
}

// respTime is ClassPortInfo's response time value: 4.096 µs × 2^20, about 4.3 s (ib_srpt's).
const respTime = 20

// Check reports what makes a an agent that cannot be answered for: no controller, more than
// MaxSlots, a controller without services or with more than 255.
func (a *Agent) Check() error {
	switch {
	case len(a.IOCs) == 0:
		return errors.New("dm: no I/O controller to advertise")
	case len(a.IOCs) > MaxSlots:
		return fmt.Errorf("dm: %d I/O controllers, at most %d", len(a.IOCs), MaxSlots)
	}
	for i, c := range a.IOCs {
		if n := len(c.Services); n == 0 || n > 255 {
			return fmt.Errorf("dm: I/O controller %d (%016x) has %d services, 1..255", i+1, c.GUID, n)
		}
	}
	return nil
}

// Answer writes the response to req into rsp (MADSize bytes) and reports whether there is
// one. A MAD that is not a Device Management request (another class, a response, a short
// buffer) gets none. SET and other methods are refused, as ib_srpt refuses them.
func (a *Agent) Answer(req, rsp MAD) bool {
	if req.Check() != nil || rsp.Check() != nil || req.MgmtClass() != ClassDeviceMgmt || req.IsResponse() {
		return false
	}
	copy(rsp[:MADSize], req[:MADSize])
	rsp.SetMethod(MethodGetResp)
	data := rsp.DMData()
	clear(data)
	switch req.Method() {
	case MethodGet:
		rsp.SetStatus(a.get(req.AttrID(), req.AttrMod(), data))
	case MethodSet:
		rsp.SetStatus(StatusUnsupMethodAttr)
	default:
		rsp.SetStatus(StatusUnsupMethod)
	}
	return true
}

func (a *Agent) get(attr uint16, mod uint32, data []byte) Status {
	switch attr {
	case AttrClassPortInfo:
		putClassPortInfo(ClassPortInfo(data), respTime)
	case AttrIOUnitInfo:
		a.putIOUnitInfo(IOUnitInfo(data))
	case AttrIOCProfile:
		c, st := a.ioc(mod)
		if st != StatusOK {
			return st
		}
		a.putIOCProfile(IOCProfile(data), c)
	case AttrSvcEntries:
		c, st := a.ioc(mod >> 16)
		if st != StatusOK {
			return st
		}
		hi, lo := int(mod>>8&0xff), int(mod&0xff)
		switch {
		case lo > hi || hi >= len(c.Services):
			return StatusNoIOC
		case hi-lo >= SvcEntriesPerMAD:
			return StatusInvalidField
		}
		for i := lo; i <= hi; i++ {
			s := c.Services[i]
			putSvcEntry(SvcEntries(data, i-lo), fmt.Sprintf("%s%016x", ServiceNameSRP, s.IDExt), s.ServiceID)
		}
	default:
		return StatusUnsupMethodAttr
	}
	return StatusOK
}

// ioc returns the controller in slot (1..16): INVALID FIELD outside the I/O unit's slots, NO
// IOC for an empty slot (ib_srpt's srpt_get_ioc).
func (a *Agent) ioc(slot uint32) (*IOC, Status) {
	switch {
	case slot == 0 || slot > MaxSlots:
		return nil, StatusInvalidField
	case int(slot) > len(a.IOCs):
		return nil, StatusNoIOC
	}
	return &a.IOCs[slot-1], StatusOK
}

func (a *Agent) putIOUnitInfo(u IOUnitInfo) {
	u[0], u[1] = 0, 1 // change id 1
	u[2] = MaxSlots
	for i := range a.IOCs {
		u.setSlot(i+1, 1)
	}
}

func (a *Agent) putIOCProfile(p IOCProfile, c *IOC) {
	be := beWriter(p)
	be.u64(0, c.GUID)
	be.u32(8, a.Profile.VendorID)
	be.u32(12, a.Profile.DeviceID)
	be.u16(16, a.Profile.DeviceVersion)
	be.u32(20, a.Profile.VendorID) // subsystem vendor id, as ib_srpt
	be.u16(28, IOClassSRP)
	be.u16(30, IOSubclassSRP)
	be.u16(32, ProtocolSRP)
	be.u16(34, ProtocolVersion)
	be.u16(40, a.Profile.SendQueueDepth)
	p[43] = 4 // RDMA read depth: the initiator's responder resources, as ib_srp offers them
	be.u32(44, a.Profile.SendSize)
	be.u32(48, min(a.Profile.RDMASize, 1<<24))
	p[52] = OpCapSRP
	p[54] = uint8(len(c.Services))
	copy(p[64:127], a.Profile.IDString)
}

type beWriter []byte

func (b beWriter) u16(at int, v uint16) { b[at], b[at+1] = byte(v>>8), byte(v) }
func (b beWriter) u32(at int, v uint32) {
	b.u16(at, uint16(v>>16))
	b.u16(at+2, uint16(v))
}
func (b beWriter) u64(at int, v uint64) {
	b.u32(at, uint32(v>>32))
	b.u32(at+4, uint32(v))
}
