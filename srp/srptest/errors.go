package srptest

import (
	"errors"
	"fmt"

	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// Sentinel errors, always wrapped with context; test with errors.Is.
var (
	// ErrConfig: a Config or Request value ib_srp would not accept or this package cannot
	// express (e.g. a layout that does not fit the data).
	ErrConfig = errors.New("srptest: invalid configuration")
	// ErrLoginResponse: the CM REP did not carry a usable SRP_LOGIN_RSP (ib_srp fails the login
	// with ECONNRESET when byte 0 is not SRP_LOGIN_RSP).
	ErrLoginResponse = errors.New("srptest: bad SRP_LOGIN_RSP")
	// ErrDisconnected: the target disconnected the channel (DREQ), or the device went away.
	ErrDisconnected = errors.New("srptest: channel disconnected")
	// ErrTransport: a work request completed with an error (the QP is in the error state).
	ErrTransport = errors.New("srptest: transport error")
	// ErrClosed: the channel was closed, logged out or vanished by this side.
	ErrClosed = errors.New("srptest: channel closed")
	// ErrNoCredits: a task management request found no credit left (ib_srp fails it at once).
	ErrNoCredits = errors.New("srptest: no credits for task management")
	// ErrNoIU: no send buffer was free (ib_srp: "no IU available").
	ErrNoIU = errors.New("srptest: no free send buffer")
	// ErrSGListTooLong: more descriptors than CmdSGEntries without AllowExtSG (ib_srp: "Could
	// not fit S/G list into SRP_CMD").
	ErrSGListTooLong = errors.New("srptest: S/G list does not fit into SRP_CMD")
	// ErrTagInUse: an explicit Request.Tag equals the tag of a command still in flight.
	ErrTagInUse = errors.New("srptest: tag in use")
	// ErrProtocol: the target sent something SRP does not allow (see Channel.ProtocolErrors).
	ErrProtocol = errors.New("srptest: SRP protocol error")
	// ErrForgotten: the request was forgotten (Pending.Forget, Channel.Abort) before its
	// response arrived.
	ErrForgotten = errors.New("srptest: request forgotten")
)

// LoginRejectedError is returned by Login when the target rejects the connection request.
type LoginRejectedError struct {
	// CMReason is the connection manager's REJ reason: memfabric.RejectConsumerDefined (28)
	// when the target rejected with an SRP_LOGIN_REJ, memfabric.RejectInvalidServiceID when
	// nobody listens.
	CMReason memfabric.RejectReason
	// Reason is the SRP_LOGIN_REJ REASON; zero if the REJ carried no (valid) SRP_LOGIN_REJ.
	Reason iu.LoginRejReason
	// Fields is the decoded SRP_LOGIN_REJ (valid when Decoded is true).
	Fields iu.LoginRejFields
	// Decoded says whether Raw held a valid SRP_LOGIN_REJ.
	Decoded bool
	// Raw is the REJ's private data as received.
	Raw []byte
}

func (e *LoginRejectedError) Error() string {
	if e.Decoded {
		return fmt.Sprintf("srptest: login rejected: %v", e.Reason)
	}
	if e.CMReason == memfabric.RejectConsumerDefined {
		return fmt.Sprintf("srptest: login rejected (consumer defined) with %d bytes of private data that are no SRP_LOGIN_REJ", len(e.Raw))
	}
	return fmt.Sprintf("srptest: login rejected by the connection manager, reason %d", e.CMReason)
}

func newLoginRejected(re *memfabric.RejectedError) *LoginRejectedError {
	e := &LoginRejectedError{CMReason: re.Reason, Raw: append([]byte(nil), re.PrivateData...)}
	// ib_srp looks at byte 0 only; a full decode needs the 32 bytes.
	if f, err := iu.Parse[iu.LoginRej](e.Raw); err == nil {
		e.Fields, e.Reason, e.Decoded = f, f.Reason, true
	}
	return e
}
