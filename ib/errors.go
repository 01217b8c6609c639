package ib

import (
	"errors"
	"strconv"
)

// Sentinel errors. Implementations wrap them with context (fmt.Errorf("...: %w", ErrX)); test
// with errors.Is.
var (
	// ErrClosed: the Conn, Listener, region or fabric was closed.
	ErrClosed = errors.New("ib: closed")
	// ErrQueueFull: no free slot in the send or receive queue (verbs: ENOMEM from post).
	ErrQueueFull = errors.New("ib: queue full")
	// ErrInvalidArgument: a work request or parameter exceeds the QP caps or device limits,
	// or is malformed (verbs: EINVAL).
	ErrInvalidArgument = errors.New("ib: invalid argument")
	// ErrPrivateDataTooLong: private data exceeds the CM limit for the message.
	ErrPrivateDataTooLong = errors.New("ib: private data too long")
	// ErrDeviceRemoved: the RDMA device went away.
	ErrDeviceRemoved = errors.New("ib: device removed")
	// ErrAnswered: the connection request was already accepted or rejected.
	ErrAnswered = errors.New("ib: connection request already answered")
	// ErrNotSupported: built without RDMA support (no cgo, or not Linux).
	ErrNotSupported = errors.New("ib: RDMA not supported in this build")
)

var statusNames = [...]string{
	StatusSuccess:                "success",
	StatusLocalLengthError:       "local length error",
	StatusLocalQPOperationError:  "local QP operation error",
	3:                            "local EE context operation error",
	StatusLocalProtectionError:   "local protection error",
	StatusWRFlushError:           "work request flushed error",
	6:                            "memory window bind error",
	StatusBadResponseError:       "bad response error",
	StatusLocalAccessError:       "local access error",
	StatusRemoteInvalidRequest:   "remote invalid request error",
	StatusRemoteAccessError:      "remote access error",
	StatusRemoteOperationError:   "remote operation error",
	StatusTransportRetryExceeded: "transport retry counter exceeded",
	StatusRNRRetryExceeded:       "RNR retry counter exceeded",
	14:                           "local RDD violation error",
	15:                           "remote invalid RD request",
	StatusRemoteAbortedError:     "aborted error",
	17:                           "invalid EE context number",
	18:                           "invalid EE context state",
	StatusFatalError:             "fatal error",
	StatusResponseTimeoutError:   "response timeout error",
	StatusGeneralError:           "general error",
}

// String returns rdma-core's wording (ibv_wc_status_str) so logs read the same as C tools.
func (s Status) String() string { return enumName(statusNames[:], s, "status") }

var opcodeNames = [...]string{OpSend: "SEND", OpRDMAWrite: "RDMA_WRITE", OpRDMARead: "RDMA_READ", OpRecv: "RECV"}

func (o Opcode) String() string { return enumName(opcodeNames[:], o, "opcode") }

var eventNames = [...]string{
	EventEstablished: "established", EventDisconnected: "disconnected", EventDeviceRemoved: "device removed",
}

func (e Event) String() string { return enumName(eventNames[:], e, "event") }

// enumName is the String of this package's enumerations: the name names gives v, or kind(v)
// where it gives none.
func enumName[T ~uint8](names []string, v T, kind string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(int(v)) + ")"
}
