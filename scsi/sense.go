package scsi

import "encoding/binary"

// SenseKey is the SPC-4 sense key (table 28).
type SenseKey uint8

// SPC-4 sense keys.
const (
	SenseNoSense        SenseKey = 0x0
	SenseRecoveredError SenseKey = 0x1
	SenseNotReady       SenseKey = 0x2
	SenseMediumError    SenseKey = 0x3
	SenseHardwareError  SenseKey = 0x4
	SenseIllegalRequest SenseKey = 0x5
	SenseUnitAttention  SenseKey = 0x6
	SenseDataProtect    SenseKey = 0x7
	SenseBlankCheck     SenseKey = 0x8
	SenseCopyAborted    SenseKey = 0xA
	SenseAbortedCommand SenseKey = 0xB
	SenseVolumeOverflow SenseKey = 0xD
	SenseMiscompare     SenseKey = 0xE
)

// Sense data response codes (SPC-4 4.5.1).
const (
	SenseCurrentFixed       = 0x70
	SenseDeferredFixed      = 0x71
	SenseCurrentDescriptor  = 0x72
	SenseDeferredDescriptor = 0x73
)

// MaxSenseLength bounds the sense data this package produces. Fixed format uses 18 bytes,
// descriptor format at most 8 + 12 (information) + 8 (sense key specific) bytes.
const MaxSenseLength = 32

// Reason names why a command ended in CHECK CONDITION. Every failure in this package goes through
// one Reason, and one table below maps each to its sense key and additional sense code, so the
// same condition always produces the same bytes.
type Reason uint8

// Reasons, named after their additional sense code in SPC-4 Annex D.
const (
	ReasonNone Reason = iota
	ReasonInvalidCommandOperationCode
	ReasonInvalidFieldInCDB
	ReasonInvalidFieldInParameterList
	ReasonParameterListLengthError
	ReasonInvalidFieldInCommandIU
	ReasonLBAOutOfRange
	ReasonLogicalUnitNotSupported
	ReasonSavingParametersNotSupported
	ReasonWriteProtected
	ReasonSpaceAllocationFailed
	ReasonUnrecoveredReadError
	ReasonWriteError
	ReasonMiscompareDuringVerify
	ReasonInternalTargetFailure
	ReasonLogicalUnitCommunicationFailure
	ReasonLogicalUnitCommunicationTimeout
	ReasonPowerOnResetOrBusDeviceReset
	ReasonPowerOnOccurred
	ReasonBusDeviceResetFunctionOccurred
	ReasonITNexusLossOccurred
	ReasonCommandsClearedByAnotherInitiator
	ReasonModeParametersChanged
	ReasonCapacityDataHasChanged
	ReasonReportedLUNsDataHasChanged
	ReasonInquiryDataHasChanged
	ReasonLogicalUnitNotReadyInitializingCommandRequired
	ReasonMediumRemovalPrevented
	ReasonOverlappedCommandsAttempted
	ReasonInsufficientResources
	ReasonReservationsPreempted
	ReasonReservationsReleased
	ReasonRegistrationsPreempted
	ReasonInvalidReleaseOfPersistentReservation
	ReasonInsufficientRegistrationResources
	ReasonAsymmetricAccessStateChanged
	ReasonLUNotAccessibleAsymmetricAccessStateTransition
	ReasonLUNotAccessibleTargetPortInStandby
	ReasonLUNotAccessibleTargetPortUnavailable
	ReasonOperationInProgress
	ReasonTooManyTargetDescriptors
	ReasonUnsupportedTargetDescriptorTypeCode
	ReasonTooManySegmentDescriptors
	ReasonUnsupportedSegmentDescriptorTypeCode
	ReasonInlineDataLengthExceeded
	ReasonUnexpectedInexactSegment
	ReasonCopyTargetDeviceNotReachable
	ReasonCopyAborted
	ReasonSanitizeInProgress
	ReasonSanitizeCommandFailed
	reasonCount
)

// senseEntry is one row of the reason table.
type senseEntry struct {
	key  SenseKey
	asc  uint8
	ascq uint8
	name string
}

// senseTable maps each Reason to its sense key and ASC/ASCQ (SPC-4 Annex D).
var senseTable = [reasonCount]senseEntry{
	ReasonNone:                                           {SenseNoSense, 0x00, 0x00, "NO ADDITIONAL SENSE INFORMATION"},
	ReasonInvalidCommandOperationCode:                    {SenseIllegalRequest, 0x20, 0x00, "INVALID COMMAND OPERATION CODE"},
	ReasonInvalidFieldInCDB:                              {SenseIllegalRequest, 0x24, 0x00, "INVALID FIELD IN CDB"},
	ReasonInvalidFieldInParameterList:                    {SenseIllegalRequest, 0x26, 0x00, "INVALID FIELD IN PARAMETER LIST"},
	ReasonParameterListLengthError:                       {SenseIllegalRequest, 0x1A, 0x00, "PARAMETER LIST LENGTH ERROR"},
	ReasonInvalidFieldInCommandIU:                        {SenseIllegalRequest, 0x0E, 0x03, "INVALID FIELD IN COMMAND INFORMATION UNIT"},
	ReasonLBAOutOfRange:                                  {SenseIllegalRequest, 0x21, 0x00, "LOGICAL BLOCK ADDRESS OUT OF RANGE"},
	ReasonLogicalUnitNotSupported:                        {SenseIllegalRequest, 0x25, 0x00, "LOGICAL UNIT NOT SUPPORTED"},
	ReasonSavingParametersNotSupported:                   {SenseIllegalRequest, 0x39, 0x00, "SAVING PARAMETERS NOT SUPPORTED"},
	ReasonWriteProtected:                                 {SenseDataProtect, 0x27, 0x00, "WRITE PROTECTED"},
	ReasonSpaceAllocationFailed:                          {SenseDataProtect, 0x27, 0x07, "SPACE ALLOCATION FAILED WRITE PROTECT"},
	ReasonUnrecoveredReadError:                           {SenseMediumError, 0x11, 0x00, "UNRECOVERED READ ERROR"},
	ReasonWriteError:                                     {SenseMediumError, 0x0C, 0x00, "WRITE ERROR"},
	ReasonMiscompareDuringVerify:                         {SenseMiscompare, 0x1D, 0x00, "MISCOMPARE DURING VERIFY OPERATION"},
	ReasonInternalTargetFailure:                          {SenseHardwareError, 0x44, 0x00, "INTERNAL TARGET FAILURE"},
	ReasonLogicalUnitCommunicationFailure:                {SenseHardwareError, 0x08, 0x00, "LOGICAL UNIT COMMUNICATION FAILURE"},
	ReasonLogicalUnitCommunicationTimeout:                {SenseHardwareError, 0x08, 0x01, "LOGICAL UNIT COMMUNICATION TIME-OUT"},
	ReasonPowerOnResetOrBusDeviceReset:                   {SenseUnitAttention, 0x29, 0x00, "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"},
	ReasonPowerOnOccurred:                                {SenseUnitAttention, 0x29, 0x01, "POWER ON OCCURRED"},
	ReasonBusDeviceResetFunctionOccurred:                 {SenseUnitAttention, 0x29, 0x03, "BUS DEVICE RESET FUNCTION OCCURRED"},
	ReasonITNexusLossOccurred:                            {SenseUnitAttention, 0x29, 0x07, "I_T NEXUS LOSS OCCURRED"},
	ReasonCommandsClearedByAnotherInitiator:              {SenseUnitAttention, 0x2F, 0x00, "COMMANDS CLEARED BY ANOTHER INITIATOR"},
	ReasonModeParametersChanged:                          {SenseUnitAttention, 0x2A, 0x01, "MODE PARAMETERS CHANGED"},
	ReasonCapacityDataHasChanged:                         {SenseUnitAttention, 0x2A, 0x09, "CAPACITY DATA HAS CHANGED"},
	ReasonReportedLUNsDataHasChanged:                     {SenseUnitAttention, 0x3F, 0x0E, "REPORTED LUNS DATA HAS CHANGED"},
	ReasonInquiryDataHasChanged:                          {SenseUnitAttention, 0x3F, 0x03, "INQUIRY DATA HAS CHANGED"},
	ReasonLogicalUnitNotReadyInitializingCommandRequired: {SenseNotReady, 0x04, 0x02, "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED"},
	ReasonMediumRemovalPrevented:                         {SenseIllegalRequest, 0x53, 0x02, "MEDIUM REMOVAL PREVENTED"},
	ReasonOverlappedCommandsAttempted:                    {SenseAbortedCommand, 0x4E, 0x00, "OVERLAPPED COMMANDS ATTEMPTED"},
	ReasonInsufficientResources:                          {SenseIllegalRequest, 0x55, 0x03, "INSUFFICIENT RESOURCES"},
	ReasonReservationsPreempted:                          {SenseUnitAttention, 0x2A, 0x03, "RESERVATIONS PREEMPTED"},
	ReasonReservationsReleased:                           {SenseUnitAttention, 0x2A, 0x04, "RESERVATIONS RELEASED"},
	ReasonRegistrationsPreempted:                         {SenseUnitAttention, 0x2A, 0x05, "REGISTRATIONS PREEMPTED"},
	ReasonInvalidReleaseOfPersistentReservation:          {SenseIllegalRequest, 0x26, 0x04, "INVALID RELEASE OF PERSISTENT RESERVATION"},
	ReasonInsufficientRegistrationResources:              {SenseIllegalRequest, 0x55, 0x04, "INSUFFICIENT REGISTRATION RESOURCES"},
	ReasonAsymmetricAccessStateChanged:                   {SenseUnitAttention, 0x2A, 0x06, "ASYMMETRIC ACCESS STATE CHANGED"},
	ReasonLUNotAccessibleAsymmetricAccessStateTransition: {SenseNotReady, 0x04, 0x0A, "LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION"},
	ReasonLUNotAccessibleTargetPortInStandby:             {SenseNotReady, 0x04, 0x0B, "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE"},
	ReasonLUNotAccessibleTargetPortUnavailable:           {SenseNotReady, 0x04, 0x0C, "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE"},
	ReasonOperationInProgress:                            {SenseIllegalRequest, 0x00, 0x16, "OPERATION IN PROGRESS"},
	ReasonTooManyTargetDescriptors:                       {SenseIllegalRequest, 0x26, 0x06, "TOO MANY TARGET DESCRIPTORS"},
	ReasonUnsupportedTargetDescriptorTypeCode:            {SenseIllegalRequest, 0x26, 0x07, "UNSUPPORTED TARGET DESCRIPTOR TYPE CODE"},
	ReasonTooManySegmentDescriptors:                      {SenseIllegalRequest, 0x26, 0x08, "TOO MANY SEGMENT DESCRIPTORS"},
	ReasonUnsupportedSegmentDescriptorTypeCode:           {SenseIllegalRequest, 0x26, 0x09, "UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE"},
	ReasonInlineDataLengthExceeded:                       {SenseIllegalRequest, 0x26, 0x0B, "INLINE DATA LENGTH EXCEEDED"},
	ReasonUnexpectedInexactSegment:                       {SenseCopyAborted, 0x26, 0x0A, "UNEXPECTED INEXACT SEGMENT"},
	ReasonCopyTargetDeviceNotReachable:                   {SenseCopyAborted, 0x0D, 0x02, "COPY TARGET DEVICE NOT REACHABLE"},
	ReasonCopyAborted:                                    {SenseCopyAborted, 0x00, 0x00, "NO ADDITIONAL SENSE INFORMATION"},
	ReasonSanitizeInProgress:                             {SenseNotReady, 0x04, 0x1B, "LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS"},
	ReasonSanitizeCommandFailed:                          {SenseMediumError, 0x31, 0x03, "SANITIZE COMMAND FAILED"},
}

// Key is the sense key the reason reports.
func (r Reason) Key() SenseKey { return senseTable[r].key }

// ASC is the additional sense code.
func (r Reason) ASC() uint8 { return senseTable[r].asc }

// ASCQ is the additional sense code qualifier.
func (r Reason) ASCQ() uint8 { return senseTable[r].ascq }

func (r Reason) String() string {
	if r >= reasonCount {
		return "UNKNOWN REASON"
	}
	return senseTable[r].name
}

// SenseInfo is the optional detail of a CHECK CONDITION beyond its Reason.
type SenseInfo struct {
	// Information is the INFORMATION field (the failing LBA, the miscompare offset), valid when
	// InformationValid.
	Information      uint64
	InformationValid bool
	// FieldPointer locates the offending field for ILLEGAL REQUEST (SPC-4 4.5.2.4.2): the byte
	// (and bit, when BitPointerValid) in the CDB (InCDB) or the parameter list. With COPY
	// ABORTED it is a segment pointer (SPC-4 4.5.2.4.6): relative to the segment descriptor the
	// COMMAND-SPECIFIC INFORMATION names (SegmentDescriptor), else to the parameter list.
	FieldPointerValid bool
	InCDB             bool
	SegmentDescriptor bool
	BitPointerValid   bool
	BitPointer        uint8
	FieldPointer      uint16
	// CommandSpecific is the COMMAND-SPECIFIC INFORMATION field, valid when
	// CommandSpecificValid: the number of the segment descriptor an EXTENDED COPY failed in.
	CommandSpecific      uint32
	CommandSpecificValid bool
	// CopyAborted reports the reason's additional sense code with the sense key COPY ABORTED:
	// a copy target's error (a medium error, WRITE PROTECTED) that ended an EXTENDED COPY.
	CopyAborted bool
	// Progress is the PROGRESS INDICATION of the sense key specific bytes (SPC-4 4.5.2.4.4),
	// in 65536ths of the operation done, valid when ProgressValid (a sanitize in progress).
	ProgressValid bool
	Progress      uint16
}

// BuildSense writes sense data for reason into buf in fixed (descriptor == false) or descriptor
// format and returns its length. buf must hold MaxSenseLength bytes. In descriptor format a
// descriptor that does not fit is left out, the sense key specific one first (no reason of this
// package carries all three of information, command-specific information and a field pointer).
func BuildSense(buf []byte, descriptor bool, reason Reason, info SenseInfo) int {
	e := senseTable[reason]
	if info.CopyAborted {
		e.key = SenseCopyAborted
	}
	var sks [3]byte
	if info.FieldPointerValid {
		sks[0] = 0x80 // SKSV
		if info.InCDB {
			sks[0] |= 0x40 // C/D
		}
		if info.SegmentDescriptor {
			sks[0] |= 0x20 // SD
		}
		if info.BitPointerValid {
			sks[0] |= 0x08 | info.BitPointer&0x7 // BPV, BIT POINTER
		}
		binary.BigEndian.PutUint16(sks[1:], info.FieldPointer)
	}
	if info.ProgressValid {
		sks[0] = 0x80 // SKSV
		binary.BigEndian.PutUint16(sks[1:], info.Progress)
	}
	if !descriptor {
		const n = 18
		clear(buf[:n])
		buf[0] = SenseCurrentFixed
		if info.InformationValid {
			buf[0] |= 0x80 // VALID
			// The fixed format's INFORMATION field has 4 bytes; larger values cannot be
			// represented, and SPC-4 says VALID is then zero.
			if info.Information > 0xFFFFFFFF {
				buf[0] &^= 0x80
			} else {
				binary.BigEndian.PutUint32(buf[3:], uint32(info.Information))
			}
		}
		buf[2] = byte(e.key)
		if info.CommandSpecificValid {
			binary.BigEndian.PutUint32(buf[8:], info.CommandSpecific)
		}
		buf[7] = n - 8 // ADDITIONAL SENSE LENGTH
		buf[12] = e.asc
		buf[13] = e.ascq
		copy(buf[15:18], sks[:])
		return n
	}
	clear(buf[:8])
	buf[0] = SenseCurrentDescriptor
	buf[1] = byte(e.key)
	buf[2] = e.asc
	buf[3] = e.ascq
	n := 8
	if info.InformationValid {
		// Information descriptor (SPC-4 4.5.2.2).
		d := buf[n : n+12]
		d[0], d[1], d[2], d[3] = 0x00, 0x0A, 0x80, 0x00
		binary.BigEndian.PutUint64(d[4:], info.Information)
		n += 12
	}
	if info.CommandSpecificValid {
		// Command-specific information descriptor (SPC-4 4.5.2.3).
		d := buf[n : n+12]
		d[0], d[1], d[2], d[3] = 0x01, 0x0A, 0x00, 0x00
		binary.BigEndian.PutUint64(d[4:], uint64(info.CommandSpecific))
		n += 12
	}
	if (info.FieldPointerValid || info.ProgressValid) && n+8 <= MaxSenseLength {
		// Sense key specific descriptor (SPC-4 4.5.2.3).
		d := buf[n : n+8]
		d[0], d[1], d[2], d[3] = 0x02, 0x06, 0x00, 0x00
		copy(d[4:7], sks[:])
		d[7] = 0
		n += 8
	}
	buf[7] = byte(n - 8) // ADDITIONAL SENSE LENGTH
	return n
}

// ParsedSense is the decoded content of sense data; tests and logs use it.
type ParsedSense struct {
	ResponseCode uint8
	Key          SenseKey
	ASC, ASCQ    uint8
	SenseInfo
}

// ParseSense decodes fixed or descriptor sense data. ok is false when b is not sense data this
// package understands.
func ParseSense(b []byte) (p ParsedSense, ok bool) {
	if len(b) < 8 {
		return p, false
	}
	p.ResponseCode = b[0] & 0x7F
	switch p.ResponseCode {
	case SenseCurrentFixed, SenseDeferredFixed:
		if len(b) < 14 {
			return p, false
		}
		p.Key = SenseKey(b[2] & 0x0F)
		p.ASC, p.ASCQ = b[12], b[13]
		if b[0]&0x80 != 0 {
			p.InformationValid = true
			p.Information = uint64(binary.BigEndian.Uint32(b[3:]))
		}
		if len(b) >= 12 && b[7] >= 4 {
			p.CommandSpecific = binary.BigEndian.Uint32(b[8:])
			p.CommandSpecificValid = p.CommandSpecific != 0
		}
		if len(b) >= 18 && b[15]&0x80 != 0 {
			parseSKS(&p.SenseInfo, b[15:18])
		}
		return p, true
	case SenseCurrentDescriptor, SenseDeferredDescriptor:
		p.Key = SenseKey(b[1] & 0x0F)
		p.ASC, p.ASCQ = b[2], b[3]
		end := 8 + int(b[7])
		if end > len(b) {
			end = len(b)
		}
		for i := 8; i+2 <= end; {
			typ, l := b[i], int(b[i+1])
			if i+2+l > end {
				break
			}
			d := b[i : i+2+l]
			switch {
			case typ == 0x00 && l >= 0x0A:
				p.InformationValid = d[2]&0x80 != 0
				p.Information = binary.BigEndian.Uint64(d[4:12])
			case typ == 0x01 && l >= 0x0A:
				p.CommandSpecificValid = true
				p.CommandSpecific = uint32(binary.BigEndian.Uint64(d[4:12]))
			case typ == 0x02 && l >= 0x06 && d[4]&0x80 != 0:
				parseSKS(&p.SenseInfo, d[4:7])
			}
			i += 2 + l
		}
		return p, true
	}
	return p, false
}

// parseSKS decodes the sense key specific bytes as a field pointer (a PROGRESS INDICATION reads
// as a field pointer: the caller knows from the sense key which it is).
func parseSKS(info *SenseInfo, sks []byte) {
	info.FieldPointerValid = true
	info.InCDB = sks[0]&0x40 != 0
	info.SegmentDescriptor = sks[0]&0x20 != 0
	info.BitPointerValid = sks[0]&0x08 != 0
	info.BitPointer = sks[0] & 0x7
	info.FieldPointer = binary.BigEndian.Uint16(sks[1:])
}
