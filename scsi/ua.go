package scsi

import (
	"errors"
	"syscall"

	"github.com/srptarget/srptarget/backstore"
)

// uaPriority is the order in which pending unit attentions are reported: resets first, since
// they tell the initiator its earlier state is gone, then changes of what it sees.
var uaPriority = [...]Reason{
	ReasonPowerOnResetOrBusDeviceReset,
	ReasonPowerOnOccurred,
	ReasonBusDeviceResetFunctionOccurred,
	ReasonITNexusLossOccurred,
	ReasonCommandsClearedByAnotherInitiator,
	ReasonModeParametersChanged,
	ReasonCapacityDataHasChanged,
	ReasonReportedLUNsDataHasChanged,
	ReasonInquiryDataHasChanged,
}

// uaSet is the set of pending unit attentions of one nexus, a bit per Reason.
type uaSet uint64

func (s *uaSet) add(r Reason) {
	// A reset condition covers everything that happened before it (SPC-4 5.14: the power on or
	// reset unit attention replaces the others).
	if r == ReasonPowerOnResetOrBusDeviceReset || r == ReasonPowerOnOccurred {
		*s = 0
	}
	*s |= 1 << r
}

func (s *uaSet) remove(r Reason) { *s &^= 1 << r }

func (s uaSet) peek() Reason {
	if s == 0 {
		return ReasonNone
	}
	for _, r := range uaPriority {
		if s&(1<<r) != 0 {
			return r
		}
	}
	return ReasonNone
}

func (s *uaSet) take() Reason {
	r := s.peek()
	if r != ReasonNone {
		s.remove(r)
	}
	return r
}

// reasonForIOError maps a backstore error to the sense it reports, keeping the errno's meaning:
// no space is a thin-provisioning failure, a read-only store is write protection, anything else
// is a medium error of the direction that failed.
func reasonForIOError(err error, read bool) Reason {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ReasonSpaceAllocationFailed
	case errors.Is(err, syscall.EROFS):
		return ReasonWriteProtected
	case errors.Is(err, backstore.ErrOutOfRange):
		return ReasonLBAOutOfRange
	case errors.Is(err, syscall.ENOMEM):
		return ReasonInsufficientResources
	case errors.Is(err, backstore.ErrClosed), errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.ENODEV):
		return ReasonLogicalUnitCommunicationFailure
	case read:
		return ReasonUnrecoveredReadError
	}
	return ReasonWriteError
}
