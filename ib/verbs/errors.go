package verbs

import (
	"fmt"
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
