//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// Devices lists the RDMA devices with their ports and GIDs. An empty list and no error mean
// the kernel supports RDMA but has no device; an error wrapping ErrNoDevice means it has no
// RDMA support at all (libibverbs reports ENOSYS).
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		e := errnoOr(err, errnoENOSYS)
		return nil, errorf("list devices: %w", multi(ErrNoDevice, e))
	}
	defer C.ibv_free_device_list(list)
	devices := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(devices))
	for _, dev := range devices {
		info, err := describe(dev)
		if err != nil {
			return out, err
		}
		out = append(out, info)
	}
	return out, nil
}

func describe(dev *C.struct_ibv_device) (DeviceInfo, error) {
	info := DeviceInfo{
		Name:     C.GoString(C.ibv_get_device_name(dev)),
		NodeGUID: uint64(C.srpt_device_guid(dev)),
	}
	ctx, err := C.ibv_open_device(dev)
	if ctx == nil {
		return info, errorf("open device %s: %w", info.Name, errnoOr(err, errnoENODEV))
	}
	defer C.ibv_close_device(ctx)
	var attr C.struct_srpt_device_attr
	if e := C.srpt_query_device(ctx, &attr); e != 0 {
		return info, errorf("query device %s: %w", info.Name, syscall.Errno(e))
	}
	total := 0
	for p := 1; p <= int(attr.phys_port_cnt); p++ {
		var pa C.struct_srpt_port_attr
		if e := C.srpt_query_port(ctx, C.uint8_t(p), &pa); e != 0 {
			return info, errorf("query port %s/%d: %w", info.Name, p, syscall.Errno(e))
		}
		info.Ports = append(info.Ports, PortInfo{
			Num:       p,
			State:     PortState(pa.state),
			LinkLayer: LinkLayer(pa.link_layer),
			ActiveMTU: mtuBytes(int(pa.active_mtu)),
			LID:       uint16(pa.lid),
			SMLID:     uint16(pa.sm_lid),
			CapMask:   uint32(pa.port_cap_flags),
			PKey:      uint16(pa.pkey0),
		})
		total += int(pa.gid_tbl_len)
	}
	if total == 0 {
		return info, nil
	}
	entries := make([]C.struct_ibv_gid_entry, total)
	got := C.srpt_query_gids(ctx, &entries[0], C.long(total))
	if got < 0 {
		// Old kernels lack the GID table query; the device is still worth listing.
		return info, nil
	}
	for _, e := range entries[:got] {
		p := int(e.port_num)
		if p < 1 || p > len(info.Ports) {
			continue
		}
		g := GIDInfo{
			Index: int(e.gid_index),
			GID:   netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&e.gid))),
			Type:  GIDType(e.gid_type),
		}
		if e.ndev_ifindex != 0 {
			if ifi, err := net.InterfaceByIndex(int(e.ndev_ifindex)); err == nil {
				g.Netdev = ifi.Name
			}
		}
		info.Ports[p-1].GIDs = append(info.Ports[p-1].GIDs, g)
	}
	return info, nil
}
