package scsi

// Status is the SCSI status byte (SAM-5 table 37).
type Status uint8

// SAM-5 status codes.
const (
	StatusGood                Status = 0x00
	StatusCheckCondition      Status = 0x02
	StatusConditionMet        Status = 0x04
	StatusBusy                Status = 0x08
	StatusReservationConflict Status = 0x18
	StatusTaskSetFull         Status = 0x28
	StatusACAActive           Status = 0x30
	StatusTaskAborted         Status = 0x40
)

func (s Status) String() string {
	switch s {
	case StatusGood:
		return "GOOD"
	case StatusCheckCondition:
		return "CHECK CONDITION"
	case StatusConditionMet:
		return "CONDITION MET"
	case StatusBusy:
		return "BUSY"
	case StatusReservationConflict:
		return "RESERVATION CONFLICT"
	case StatusTaskSetFull:
		return "TASK SET FULL"
	case StatusACAActive:
		return "ACA ACTIVE"
	case StatusTaskAborted:
		return "TASK ABORTED"
	}
	return "UNKNOWN STATUS"
}

// TaskAttribute is the SAM-5 task attribute a command was queued with.
type TaskAttribute uint8

// SAM-5 task attributes. The numbering is this package's own; transports map their encodings.
const (
	TaskSimple TaskAttribute = iota
	TaskOrdered
	TaskHeadOfQueue
	TaskACA
)

func (a TaskAttribute) String() string {
	switch a {
	case TaskSimple:
		return "SIMPLE"
	case TaskOrdered:
		return "ORDERED"
	case TaskHeadOfQueue:
		return "HEAD OF QUEUE"
	case TaskACA:
		return "ACA"
	}
	return "UNKNOWN"
}

// TMFResponse is the outcome of a task management function (SAM-5 7.10).
type TMFResponse uint8

// SAM-5 task management function service responses.
const (
	TMFComplete TMFResponse = iota
	TMFSucceeded
	TMFRejected
	TMFIncorrectLUN
	TMFServiceDeliveryFailure
)

func (r TMFResponse) String() string {
	switch r {
	case TMFComplete:
		return "FUNCTION COMPLETE"
	case TMFSucceeded:
		return "FUNCTION SUCCEEDED"
	case TMFRejected:
		return "FUNCTION REJECTED"
	case TMFIncorrectLUN:
		return "INCORRECT LOGICAL UNIT NUMBER"
	case TMFServiceDeliveryFailure:
		return "SERVICE DELIVERY OR TARGET FAILURE"
	}
	return "UNKNOWN"
}
