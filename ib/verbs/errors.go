package verbs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// Errno values used in the mappings below, spelled out with Linux's numbers: this file is
// built everywhere (it is tested without cgo) but only ever maps errnos that librdmacm and
// libibverbs return on Linux.
const (
	errnoENOENT        = syscall.Errno(2)
	errnoEIO           = syscall.Errno(5)
	errnoENXIO         = syscall.Errno(6)
	errnoEAGAIN        = syscall.Errno(11)
	errnoENOMEM        = syscall.Errno(12)
	errnoENODEV        = syscall.Errno(19)
	errnoEINVAL        = syscall.Errno(22)
	errnoENOSYS        = syscall.Errno(38)
	errnoENODATA       = syscall.Errno(61)
	errnoEADDRNOTAVAIL = syscall.Errno(99)
)

// postError classifies the errno of ibv_post_send / ibv_post_recv. Providers return ENOMEM
// for a full queue and EINVAL for a malformed work request; EIO or ENODEV come from a device
// that is gone (a disassociated context). The errno stays in the chain for errors.Is.
func postError(e syscall.Errno) error {
	switch e {
	case errnoENOMEM:
		return multi(ib.ErrQueueFull, e)
	case errnoEINVAL:
		return multi(ib.ErrInvalidArgument, e)
	case errnoEIO, errnoENODEV, errnoENXIO:
		return multi(ib.ErrDeviceRemoved, e)
	}
	return e
}

// setupError classifies the errno of creating librdmacm's event channel or an id: ENODEV
// (no device at all), ENOSYS (no kernel support) and ENOENT (no /dev/infiniband/rdma_cm) all
// mean that there is nothing to listen on.
func setupError(e syscall.Errno) error {
	switch e {
	case errnoENODEV, errnoENOSYS, errnoENOENT, errnoENXIO:
		return multi(ErrNoDevice, e)
	case errnoEINVAL:
		return multi(ib.ErrInvalidArgument, e)
	}
	return e
}

// bindError classifies the errno of rdma_bind_addr and rdma_resolve_addr: EADDRNOTAVAIL or
// ENODEV when no RDMA device has (or reaches) the address.
func bindError(e syscall.Errno) error {
	if e == errnoENODEV || e == errnoEADDRNOTAVAIL {
		return multi(ErrNoDevice, e)
	}
	return e
}

// cmStatusError turns the status of a failed RDMA/CM event (a negative errno: ADDR_ERROR,
// ROUTE_ERROR, UNREACHABLE, CONNECT_ERROR) into an error.
func cmStatusError(status int) error {
	if status < 0 {
		e := syscall.Errno(-status)
		if e == errnoENODEV {
			return multi(ErrNoDevice, e)
		}
		return e
	}
	if status == 0 {
		return errnoEIO
	}
	return syscall.Errno(status)
}

// multi wraps two errors so that errors.Is finds both: the package's sentinel and the errno it
// came from.
func multi(a, b error) error { return fmt.Errorf("%w (%w)", a, b) }

// Errno values of AF_IB binds.
const (
	errnoEACCES          = syscall.Errno(13)
	errnoEADDRINUSE      = syscall.Errno(98)
	errnoEPROTONOSUPPORT = syscall.Errno(93)
)

// ErrNoIBPort: ListenIB found RDMA devices, but no port whose link layer is InfiniBand. The
// kernel delivers AF_IB connection requests only on such ports (on RoCE and iWARP it rejects
// them before they reach user space), so the listener would never receive a login.
var ErrNoIBPort = errors.New("verbs: no InfiniBand port")

// ErrServiceID: the service ID of an AF_IB listener is not in RDMA CM's IB port space.
var ErrServiceID = errors.New("verbs: service ID outside RDMA CM's IB port space")

// serviceIDError says why sid cannot be listened on.
func serviceIDError(sid uint64) error {
	return fmt.Errorf("%w: %#016x is not of the form 0x00000000013fPPPP (PPPP the port): RDMA CM binds AF_IB ids in its IB port space only on such service IDs, so a node GUID (what LIO's ib_srpt listens on) cannot be used", ErrServiceID, sid)
}

// bindIBError classifies the errno of rdma_bind_addr for an AF_IB address with service ID
// sid (drivers/infiniband/core/cma.c): EPROTONOSUPPORT for a service ID outside the IB port
// space (cma_select_ib_ps), ENODEV when no InfiniBand port has the GID
// (cma_acquire_dev_by_src_ip; a RoCE port never has one), EADDRNOTAVAIL or EADDRINUSE when
// the service ID is bound already (cma_check_port: EADDRNOTAVAIL where either bind is on
// every port), EACCES for a port below 1024 without CAP_NET_BIND_SERVICE.
func bindIBError(e syscall.Errno, sid uint64) error {
	switch e {
	case errnoEPROTONOSUPPORT:
		return fmt.Errorf("%w (%w)", serviceIDError(sid), e)
	case errnoENODEV:
		return fmt.Errorf("no InfiniBand port has this GID (RoCE ports have none): %w", multi(ErrNoDevice, e))
	case errnoEADDRNOTAVAIL, errnoEADDRINUSE:
		return fmt.Errorf("service ID %#016x is bound already, on every InfiniBand port or on this GID: %w", sid, e)
	case errnoEACCES:
		return fmt.Errorf("ports below 1024 need CAP_NET_BIND_SERVICE: %w", e)
	}
	return e
}

// checkIBPort reports ErrNoIBPort unless one of devs has a port with an InfiniBand link
// layer, naming what there is; ErrNoDevice when there is no device (err is Devices').
func checkIBPort(devs []DeviceInfo, err error) error {
	if err != nil {
		return err
	}
	if len(devs) == 0 {
		return fmt.Errorf("%w: the host has no RDMA device", ErrNoDevice)
	}
	var others []string
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer == LinkLayerInfiniBand {
				return nil
			}
			others = append(others, fmt.Sprintf("%s port %d is %v", d.Name, p.Num, p.LinkLayer))
		}
	}
	return fmt.Errorf("%w: %s; the kernel delivers AF_IB connection requests only on InfiniBand ports (on RoCE it rejects them before they reach user space): on this host, listen on an IP address (ib_srp's dest=)",
		ErrNoIBPort, strings.Join(others, ", "))
}

// haveIBPort checks the host's devices with checkIBPort.
func haveIBPort() error { return checkIBPort(Devices()) }
