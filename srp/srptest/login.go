package srptest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// maxTIIULen bounds the receive buffers Login allocates from a login response (16 MiB): a
// larger MAXIMUM TI IU LENGTH is reported as a bad response rather than allocated 64 times.
const maxTIIULen = 16 << 20

// Login opens one RDMA channel to the target at cfg.Addr and logs in as ib_srp does:
// connection request with the SRP_LOGIN_REQ as private data, then, on the SRP_LOGIN_RSP,
// QueueDepth receive buffers of MAXIMUM TI IU LENGTH bytes posted and the credit counter set
// to the REQUEST LIMIT DELTA. A rejection returns a *LoginRejectedError. The channel must be
// ended with Close, Logout or Vanish.
func Login(ctx context.Context, fab *memfabric.Fabric, cfg Config) (*Channel, error) {
	cfg, err := cfg.onNode(fab)
	if err != nil {
		return nil, err
	}
	return login(ctx, cfg.Node, cfg)
}

// LoginMulti logs in n channels of one session from one node, as ib_srp does for ch_count = n:
// one after the other, the first with MULTI-CHANNEL ACTION single, the others with multi,
// channel i using i as its tag prefix. If the first login fails, LoginMulti returns its error
// and no channel. If a later one fails, ib_srp keeps the channels it has and stops: so does
// LoginMulti, returning those channels together with the error of the one that failed.
func LoginMulti(ctx context.Context, fab *memfabric.Fabric, cfg Config, n int) ([]*Channel, error) {
	if n < 1 || n > 1<<16 {
		return nil, fmt.Errorf("srptest: %d channels: %w", n, ErrConfig)
	}
	cfg, err := cfg.onNode(fab)
	if err != nil {
		return nil, err
	}
	chans := make([]*Channel, 0, n)
	for i := 0; i < n; i++ {
		c := cfg
		c.ChannelIndex = uint16(i)
		c.MultiChannel = iu.MultiChanSingle
		if i > 0 {
			c.MultiChannel = iu.MultiChanMulti
		}
		ch, err := login(ctx, cfg.Node, c)
		if err != nil {
			if i == 0 {
				return nil, err
			}
			return chans, fmt.Errorf("srptest: channel %d of %d: %w", i, n, err)
		}
		chans = append(chans, ch)
	}
	return chans, nil
}

var nextSource atomic.Uint32

// onNode is cfg with its defaults filled in and its Node set (node): what a login starts from.
func (cfg Config) onNode(fab *memfabric.Fabric) (Config, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return cfg, err
	}
	cfg.Node, err = cfg.node(fab)
	return cfg, err
}

// node returns cfg.Node, or a new node at cfg.Source or at a free address in 198.18.0.0/15
// (the benchmarking range, which no test target uses by accident).
func (cfg *Config) node(fab *memfabric.Fabric) (*memfabric.Node, error) {
	if cfg.Node != nil {
		return cfg.Node, nil
	}
	if fab == nil {
		return nil, fmt.Errorf("srptest: neither a fabric nor a node: %w", ErrConfig)
	}
	if cfg.Source.IsValid() {
		n, err := fab.NewNode(cfg.Source)
		if err != nil {
			return nil, fmt.Errorf("srptest: initiator node %v (pass an existing node in Config.Node): %w", cfg.Source, err)
		}
		return n, nil
	}
	for range 1 << 12 {
		v := nextSource.Add(1)
		a := netip.AddrFrom4([4]byte{198, 18 + byte(v>>16&1), byte(v >> 8), byte(v)})
		n, err := fab.NewNode(a)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("srptest: initiator node %v: %w", a, err)
		}
	}
	return nil, fmt.Errorf("srptest: no free initiator address in 198.18.0.0/15: %w", ErrConfig)
}

// defaultInitiatorPortID is 8 zero bytes (initiator_ext 0) followed by the modified EUI-64
// of a MAC address made from the node address (02:00:a:b:c:d for IPv4 a.b.c.d; the last 8
// bytes for IPv6), standing in for the interface ID of the local GID that ib_srp uses.
func defaultInitiatorPortID(a netip.Addr) iu.PortID {
	var id iu.PortID
	if a.Is4() {
		b := a.As4()
		// MAC 02:00:b0:b1:b2:b3 -> EUI-64 00:00:b0:ff:fe:b1:b2:b3 (U/L bit flipped).
		copy(id[8:], []byte{0x00, 0x00, b[0], 0xff, 0xfe, b[1], b[2], b[3]})
	} else {
		b := a.As16()
		copy(id[8:], b[8:])
	}
	return id
}

// LoginRequest returns the SRP_LOGIN_REQ that Login sends for cfg (after defaults): the
// 56-byte RDMA/CM form or the 64-byte IB CM form.
func LoginRequest(cfg Config) ([]byte, error) {
	if !cfg.Addr.IsValid() {
		// Only the login bytes are wanted: any address passes the check.
		cfg.Addr = netip.AddrPortFrom(netip.IPv6Unspecified(), 1)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return buildLoginReq(&cfg), nil
}

// buildLoginReq is srp_send_req's private data.
func buildLoginReq(cfg *Config) []byte {
	f := iu.LoginReqFields{
		Tag:             cfg.LoginTag,
		ReqITIULen:      cfg.reqITIULen(),
		ReqBufFmt:       cfg.ReqBufFmt,
		ReqFlags:        cfg.MultiChannel | cfg.ExtraReqFlags,
		InitiatorPortID: cfg.InitiatorPortID,
		TargetPortID:    cfg.TargetPortID,
	}
	if cfg.immRequested() {
		// ib_srp sets the offset only together with the flag; otherwise the field stays 0.
		f.ReqFlags |= iu.ImmedRequested
		f.ImmDataOffset = cfg.ImmDataOffset
	}
	if cfg.LoginForm == LoginFormIBCM {
		b := make([]byte, iu.LoginReqSize)
		iu.LoginReq(b).Encode(&f)
		return b
	}
	b := make([]byte, iu.LoginReqRDMASize)
	iu.LoginReqRDMA(b).Encode(&f)
	return b
}

// login connects one channel from node with a complete cfg.
func login(ctx context.Context, node *memfabric.Node, cfg Config) (*Channel, error) {
	if cfg.InitiatorPortID == (iu.PortID{}) {
		cfg.InitiatorPortID = defaultInitiatorPortID(node.Addr())
	}
	lim := node.Limits()
	caps := ib.QPCaps{
		// Commands, task management and answers to target requests share QueueDepth send
		// buffers as in ib_srp; the rest is room for raw IUs.
		SendQueueDepth: min(2*cfg.QueueDepth+16, lim.MaxQueueDepth),
		RecvQueueDepth: min(cfg.QueueDepth, lim.MaxQueueDepth),
		MaxSendSGE:     min(maxSGE, lim.MaxSendSGE),
		MaxRecvSGE:     1,
	}
	if caps.RecvQueueDepth < cfg.QueueDepth {
		return nil, fmt.Errorf("srptest: queue depth %d exceeds the device's %d: %w", cfg.QueueDepth, lim.MaxQueueDepth, ErrConfig)
	}
	req := buildLoginReq(&cfg)
	conn, err := node.Connect(ctx, cfg.Addr, req, memfabric.ConnectParams{
		QP:                 caps,
		RNRRetryCount:      cfg.rnrRetry(),
		ResponderResources: cfg.ResponderResources,
		InitiatorDepth:     0, // the initiator never issues RDMA READs
		Family:             cfg.Family,
		PortSpace:          cfg.PortSpace,
	})
	if err != nil {
		var re *memfabric.RejectedError
		if errors.As(err, &re) {
			return nil, newLoginRejected(re)
		}
		return nil, fmt.Errorf("srptest: login to %v: %w", cfg.Addr, err)
	}
	c, err := newChannel(node, conn, cfg, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}
