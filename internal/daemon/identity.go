package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/srp/iu"
)

// Identity is the SRP target port identifier: id_ext (bytes 0-7) and ioc_guid (bytes 8-15),
// the two values an initiator names in add_target.
type Identity struct {
	idExt, iocGUID uint64
	// from says where it came from, for logs: "configuration" or "node GUID of mlx5_0".
	from string
}

func (id Identity) portID() iu.PortID {
	var p iu.PortID
	binary.BigEndian.PutUint64(p[0:8], id.idExt)
	binary.BigEndian.PutUint64(p[8:16], id.iocGUID)
	return p
}

// ResolveIdentity takes id_ext and ioc_guid from the configuration (config.Target.Identity).
// When neither is given, both are the node GUID of the first RDMA device (by name, with a
// non-zero GUID): what LIO's ib_srpt uses for its own target port (srpt_service_guid), so an
// initiator configured for LIO logs in here unchanged. SCST's ib_srpt clears the GUID's top
// byte, which makes the same value only for GUIDs whose top byte is 0.
func ResolveIdentity(t config.Target, devices DevicesFunc) (Identity, error) {
	if t.Configured() {
		idExt, iocGUID, err := t.Identity()
		if err != nil {
			return Identity{}, err
		}
		return Identity{idExt: idExt, iocGUID: iocGUID, from: "configuration"}, nil
	}
	const fix = "set target.id_ext and target.ioc_guid in the configuration"
	if devices == nil {
		return Identity{}, errors.New("no RDMA device list to take the node GUID from: " + fix)
	}
	devs, err := devices()
	if err != nil {
		return Identity{}, fmt.Errorf("target identity: reading the node GUID of the first RDMA device: %w; or %s", err, fix)
	}
	devs = slices.Clone(devs)
	slices.SortFunc(devs, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
	for _, d := range devs {
		if d.NodeGUID != 0 {
			return Identity{idExt: d.NodeGUID, iocGUID: d.NodeGUID, from: "node GUID of " + d.Name}, nil
		}
	}
	return Identity{}, fmt.Errorf("target identity: no RDMA device with a node GUID to take it from: %s", fix)
}

// PortIdentity is the identifier of a target.ports entry (validated): its id_ext, and its
// ioc_guid or the target's.
func PortIdentity(p config.Port, ident Identity) Identity {
	id := Identity{iocGUID: ident.iocGUID, from: "configuration"}
	id.idExt, _ = config.ParseEUI64(p.IDExt)
	if p.IOCGUID != "" {
		id.iocGUID, _ = config.ParseEUI64(p.IOCGUID)
	}
	return id
}
