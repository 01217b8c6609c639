package verbs

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// The post-time rules themselves are package ib's (ib/check.go), shared with ib/memfabric. They
// run before anything is written into a work request, so a rejected work request costs no C
// call. Checks that depend on the memory region's implementation (it must be a region of this
// package, of the connection's device) are in the cgo files.

// checkConnect checks an initiator's parameters against the device.
func checkConnect(privateData []byte, p *ConnectParams, lim ib.DeviceLimits, maxCQE int) error {
	if len(privateData) > ib.MaxConnRequestPrivateData {
		return fmt.Errorf("%d bytes of private data: %w", len(privateData), ib.ErrPrivateDataTooLong)
	}
	return ib.CheckConnParams(p.QP, p.RNRRetryCount, p.ResponderResources, p.InitiatorDepth, p.Recv, lim, maxCQE)
}
