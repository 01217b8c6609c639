package srptest

import (
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// What a test can read of a channel: the login's outcome, its configuration, its counters
// and errors, and the signals that it stopped or that the target asked it to log out.

// LoginResponse returns the decoded SRP_LOGIN_RSP.
func (c *Channel) LoginResponse() iu.LoginRspFields { return c.loginRsp }

// LoginResponseIU returns the CM REP's private data as received.
func (c *Channel) LoginResponseIU() []byte { return append([]byte(nil), c.loginRspIU...) }

// LoginRequestIU returns the SRP_LOGIN_REQ this channel sent.
func (c *Channel) LoginRequestIU() []byte { return append([]byte(nil), c.loginReq...) }

// ImmediateData reports whether the target granted immediate data (and it was requested).
func (c *Channel) ImmediateData() bool { return c.neg.immGranted }

// MaxITIULen is ib_srp's ch->max_it_iu_len after the login: the IU length immediate data
// must fit in.
func (c *Channel) MaxITIULen() uint32 { return c.neg.maxITIULen }

// CanQueue is the number of commands that may be in flight: min(initial credits - 1,
// QueueDepth - 2), at least 1.
func (c *Channel) CanQueue() int { return c.canQueue }

// Index is the channel's tag prefix (Config.ChannelIndex).
func (c *Channel) Index() uint16 { return c.cfg.ChannelIndex }

// Node is the initiator's node; pass it in Config.Node to log in again from the same address.
func (c *Channel) Node() *memfabric.Node { return c.node }

// Conn is the underlying connection, for tests that need to act below SRP.
func (c *Channel) Conn() *memfabric.Conn { return c.mconn }

// Config returns the configuration with its defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Credits returns ib_srp's req_lim: the credits the initiator holds now.
func (c *Channel) Credits() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.credits
}

// Stats returns a snapshot of the counters.
func (c *Channel) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Credits = c.credits
	return s
}

// ProtocolErrors returns the SRP violations seen so far (the first 256).
func (c *Channel) ProtocolErrors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.protoErrs...)
}

// Outstanding returns the number of commands and task management requests in flight.
func (c *Channel) Outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Disconnected is closed when the channel stops working: target DREQ, transport error, device
// removal, or Close / Logout / Vanish. Err then says why.
func (c *Channel) Disconnected() <-chan struct{} { return c.down }

// Err returns why the channel stopped working, or nil while it works.
func (c *Channel) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// TargetLogout is closed when the first SRP_T_LOGOUT arrives (ib_srp only logs it; so does this
// channel, which keeps working).
func (c *Channel) TargetLogout() <-chan struct{} { return c.tlogout }

// TargetLogoutReason returns the first SRP_T_LOGOUT's fields, and whether one arrived.
func (c *Channel) TargetLogoutReason() (iu.TLogoutFields, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.tlogout:
		return c.tlogoutF, true
	default:
		return iu.TLogoutFields{}, false
	}
}
