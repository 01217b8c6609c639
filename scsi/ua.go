package scsi

import (
	"errors"
	"sync/atomic"
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
	ReasonRegistrationsPreempted,
	ReasonReservationsPreempted,
	ReasonReservationsReleased,
	ReasonAsymmetricAccessStateChanged,
	ReasonModeParametersChanged,
	ReasonCapacityDataHasChanged,
	ReasonReportedLUNsDataHasChanged,
	ReasonInquiryDataHasChanged,
}

// uaSet is the set of pending unit attentions of one nexus, a bit per Reason. It is atomic so
// that the data path checks for a pending unit attention without taking the logical unit's lock.
type uaSet struct{ bits atomic.Uint64 }

func (s *uaSet) add(r Reason) {
	for {
		old := s.bits.Load()
		next := old | 1<<r
		// A reset condition covers everything that happened before it (SPC-4 5.14: the power
		// on or reset unit attention replaces the others).
		if r == ReasonPowerOnResetOrBusDeviceReset || r == ReasonPowerOnOccurred {
			next = 1 << r
		}
		if s.bits.CompareAndSwap(old, next) {
			return
		}
	}
}

func (s *uaSet) remove(r Reason) { s.bits.And(^uint64(1 << r)) }

func (s *uaSet) peek() Reason { return firstUA(s.bits.Load()) }

// take removes and returns the unit attention to report next.
func (s *uaSet) take() Reason {
	for {
		old := s.bits.Load()
		r := firstUA(old)
		if r == ReasonNone || s.bits.CompareAndSwap(old, old&^(1<<r)) {
			return r
		}
	}
}

// firstUA returns the pending unit attention of highest priority in bits.
func firstUA(bits uint64) Reason {
	if bits == 0 {
		return ReasonNone
	}
	for _, r := range uaPriority {
		if bits&(1<<r) != 0 {
			return r
		}
	}
	return ReasonNone
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
	case errors.Is(err, syscall.ETIMEDOUT):
		// A networked store (RBD) that did not answer within its timeout: the medium may be
		// fine, and the command may work when retried once the cluster answers again.
		return ReasonLogicalUnitCommunicationTimeout
	case read:
		return ReasonUnrecoveredReadError
	}
	return ReasonWriteError
}

// ioError turns a backstore error into sense data. A backstore failure never becomes GOOD.
// read tells which medium error fits when the errno is not more precise. lba is reported in the
// INFORMATION field.
func (c *Command) ioError(err error, read bool, lba uint64) {
	info := SenseInfo{Information: lba, InformationValid: true}
	c.failInfo(reasonForIOError(err, read), info)
}
