package checks

import (
	"encoding/json"
	"strings"
)

// Msg is the start of a message the daemon logs and a check reads. The checks read the
// daemon's state from its typed answers (status, sessions, luns, stats, /metrics) wherever it
// gives one; a Msg is for what only the log says: why a login was refused, why a listener
// waits. integration/logpins_test.go requires every Msg to begin a string literal of the
// daemon's source, so that a reworded message fails there and not as a check that silently
// stops matching.
type Msg string

// The messages the checks read.
const (
	// MsgLoginRejected is logged once per refused login, with the reason, the detail (for an
	// ACL refusal, the initiator and the ACL that would let it in) and the fix.
	MsgLoginRejected Msg = "login rejected"
	// MsgListenerWaits is logged when a listener's address is on no RDMA device (or, for an
	// ib listener, when there is no InfiniBand port), with the reason in "error".
	MsgListenerWaits Msg = "no RDMA device has the address of this listener yet"
	// MsgRetiredWithCommands is logged when a reload retires a logical unit whose commands
	// still run: those that reach its backstore then fail. A reload under I/O must not.
	MsgRetiredWithCommands Msg = "retired logical unit closed with commands still in progress"
	// MsgRetiredAfterCommands is the same unit closed once its commands finished.
	MsgRetiredAfterCommands Msg = "retired logical unit closed after its commands in progress finished"
	// MsgConfigError and MsgReloadFailed say why a reload was refused.
	MsgConfigError  Msg = "configuration error"
	MsgReloadFailed Msg = "reload failed"
	// MsgDeviceRemoved is ib/verbs' account of an RDMA device removed under it, with what it
	// released.
	MsgDeviceRemoved Msg = "verbs: RDMA device removed: "
	// MsgChannelClosed is logged per channel closed, with the reason ("RDMA device removed").
	MsgChannelClosed Msg = "channel closed"
	// MsgListenerFailed is logged when a listener's device goes away.
	MsgListenerFailed Msg = "listener failed"
	// MsgRDMAStalled is the stall watchdog's line for a channel it closes, naming the initiator.
	MsgRDMAStalled Msg = "RDMA stalled: "
	// MsgStartFailedLate is logged when serve, having waited for an RDMA device, could not
	// start once one appeared (after the configuration errors that say why); it then waits for
	// a reload.
	MsgStartFailedLate Msg = "the start failed once an RDMA device appeared"
	// MsgBusy counts the commands a channel answered BUSY, per channel, at most every 10 s.
	MsgBusy Msg = "commands answered BUSY"
)

// Messages are the Msg constants, for integration/logpins_test.go.
var Messages = []Msg{MsgLoginRejected, MsgListenerWaits, MsgRetiredWithCommands, MsgRetiredAfterCommands,
	MsgConfigError, MsgReloadFailed, MsgDeviceRemoved, MsgChannelClosed, MsgListenerFailed, MsgRDMAStalled, MsgBusy,
	MsgStartFailedLate}

// LogLine is one line of the daemon's console log: "time\tLEVEL\tmessage\t{fields}".
type LogLine struct {
	Time, Level, Msg string
	// Fields are the line's structured fields (zap's JSON object), nil without any.
	Fields map[string]any
	Raw    string
}

// Field is a field of the line as text ("" when it is absent).
func (l LogLine) Field(name string) string {
	switch v := l.Fields[name].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// ParseLogLine reads a line of the console log format (serve --log-format console); ok is
// false for other lines (a Go panic's, a goroutine dump's).
func ParseLogLine(s string) (LogLine, bool) {
	parts := strings.SplitN(s, "\t", 4)
	if len(parts) < 3 {
		return LogLine{}, false
	}
	l := LogLine{Time: parts[0], Level: parts[1], Msg: parts[2], Raw: s}
	if len(parts) == 4 {
		if err := json.Unmarshal([]byte(parts[3]), &l.Fields); err != nil {
			l.Msg += "\t" + parts[3]
		}
	}
	return l, true
}

// Is says whether the line is the message m.
func (l LogLine) Is(m Msg) bool { return strings.HasPrefix(l.Msg, string(m)) }
