package srp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// supportedBufFmt is what the target supports and answers in SUPPORTED BUFFER FORMATS:
// direct and indirect descriptors (external tables included).
const supportedBufFmt = iu.BufFormatDirect | iu.BufFormatIndirect

// loginError is a refused login: the SRP_LOGIN_REJ reason, what was wrong, and what the operator
// should change.
type loginError struct {
	reason iu.LoginRejReason
	detail string
	hint   string
}

// checkLogin validates a login request against the target's identity and limits. It is
// what LIO's srpt_cm_req_recv checks, in the same order of precedence, each with a reason
// ib_srp understands (it prints a dedicated message for REQ_IT_IU_LENGTH_TOO_LARGE).
func checkLogin(f *iu.LoginReqFields, targetPort iu.PortID, lim *Limits) *loginError {
	if f.TargetPortID != targetPort {
		return &loginError{
			reason: iu.LoginRejUnableAssociateChannel,
			detail: fmt.Sprintf("initiator asked for target port id_ext=%016x ioc_guid=%016x, this target is id_ext=%016x ioc_guid=%016x",
				f.TargetPortID.IDExt(), f.TargetPortID.GUID(), targetPort.IDExt(), targetPort.GUID()),
			hint: fmt.Sprintf("use id_ext=%016x,ioc_guid=%016x in the initiator's add_target string, or change the target's port identifier",
				targetPort.IDExt(), targetPort.GUID()),
		}
	}
	if f.ReqITIULen > lim.MaxITIULen {
		return &loginError{
			reason: iu.LoginRejReqITIULengthTooLarge,
			detail: fmt.Sprintf("initiator asked it_iu_len %d > max_it_iu_len %d", f.ReqITIULen, lim.MaxITIULen),
			hint:   fmt.Sprintf("raise limits.max_it_iu_len to at least %d, or set max_it_iu_size=%d on the initiator", f.ReqITIULen, lim.MaxITIULen),
		}
	}
	if f.ReqITIULen < iu.LoginReqSize {
		return &loginError{
			reason: iu.LoginRejReqITIULengthTooLarge,
			detail: fmt.Sprintf("initiator asked it_iu_len %d < %d", f.ReqITIULen, iu.LoginReqSize),
			hint:   "the initiator is broken: no SRP_CMD fits in fewer than 64 bytes",
		}
	}
	if unsup := f.ReqBufFmt &^ supportedBufFmt; unsup != 0 {
		return &loginError{
			reason: iu.LoginRejUnsupportedDescriptorFmt,
			detail: fmt.Sprintf("initiator requires buffer formats %#04x, this target supports %#04x (direct and indirect)", uint16(f.ReqBufFmt), uint16(supportedBufFmt)),
			hint:   "the initiator asks for a descriptor format this target does not know",
		}
	}
	if a := f.ReqFlags.MultiChanAction(); a != iu.MultiChanSingle && a != iu.MultiChanMulti {
		return &loginError{
			reason: iu.LoginRejUnableEstablishChannel,
			detail: fmt.Sprintf("reserved MULTI-CHANNEL ACTION %d", a),
			hint:   "the initiator is broken: only 0 (single) and 1 (multiple) are defined",
		}
	}
	return nil
}

// grantImmediate reports the immediate data offset granted for f, or 0. LIO grants whenever
// asked with an offset of at least 48; this target also requires room for the 4-byte
// immediate descriptor before the data (offset >= 52, else no command could use it) and an
// offset inside the receive buffer. Linux asks with 68.
func grantImmediate(f *iu.LoginReqFields, lim *Limits) uint16 {
	if lim.DisableImmediateData || f.ReqFlags&iu.ImmedRequested == 0 {
		return 0
	}
	if f.ImmDataOffset < iu.CmdMinSize+iu.ImmBufSize || uint32(f.ImmDataOffset) >= lim.MaxITIULen {
		return 0
	}
	return f.ImmDataOffset
}

// loginFormName names the login layout of family fam for logs.
func loginFormName(fam ib.Family) string {
	switch fam {
	case ib.FamilyIP:
		return "RDMA/CM (56 bytes, IP address)"
	case ib.FamilyIB:
		return "IB CM (64 bytes, AF_IB)"
	}
	return "by length (address family unknown)"
}

// parseLogin decodes the SRP_LOGIN_REQ of req, which arrived on a listener of family fam; a
// listener that does not tell its family (0) leaves the forms to be told apart by length.
func parseLogin(req ib.ConnRequest, fam ib.Family) (iu.LoginReqFields, error) {
	b := req.PrivateData()
	switch fam {
	case ib.FamilyIP:
		return iu.Parse[iu.LoginReqRDMA](b)
	case ib.FamilyIB:
		return iu.Parse[iu.LoginReq](b)
	}
	return iu.ParseLoginReq(b)
}

// login answers one connection request that arrived on a listener of family fam (0:
// unknown): the request is checked and authorized, joins its I_T nexus (a session) and
// becomes a channel of it, or is refused with an SRP_LOGIN_REJ that says why.
func (t *Target) login(req ib.ConnRequest, fam ib.Family) {
	a, ok := t.authorizeLogin(req, fam)
	if !ok {
		return
	}
	key := nexusKey{initiator: a.f.InitiatorPortID, target: a.f.TargetPortID}
	sess, host, why := t.reg.acquireSession(key, a.hostAddr())
	if why != nil {
		t.reject(req, a.f.Tag, iu.LoginRejInsufficientResources, a.log, why.detail, why.hint)
		return
	}
	defer t.reg.releaseSession(sess, host)
	sess.loginMu.Lock()
	defer sess.loginMu.Unlock()
	sess.waitReset()
	result, le := t.joinNexus(sess, a)
	if le != nil {
		t.reject(req, a.f.Tag, le.reason, a.log, le.detail, le.hint)
		return
	}
	t.openChannel(sess, host, key, a, result)
}

// loginAttempt is a connection request on its way to a channel: the login it carries, the
// logger that names its initiator, and what the access control lists granted it.
type loginAttempt struct {
	req   ib.ConnRequest
	fam   ib.Family
	f     iu.LoginReqFields
	log   *zap.Logger
	ibSrc *ib.IBAddr  // the initiator's address on an AF_IB listener, else nil
	auth  *authHolder // the authorizer that granted m
	m     *scsi.LUNMap
}

// hostAddr is the address the host's share is kept by: its IP address, or its GID over AF_IB.
func (a *loginAttempt) hostAddr() netip.Addr {
	if a.ibSrc != nil {
		return a.ibSrc.GID
	}
	return a.req.RemoteAddr().Addr()
}

// authorizeLogin parses and checks the SRP_LOGIN_REQ of req and asks the Authorizer for its
// LUN map; it rejects the login and reports false when any of that fails.
func (t *Target) authorizeLogin(req ib.ConnRequest, fam ib.Family) (*loginAttempt, bool) {
	log := t.log.With(srcField(req, fam))
	f, err := parseLogin(req, fam)
	if err != nil {
		t.reject(req, 0, iu.LoginRejUnableEstablishChannel, log,
			fmt.Sprintf("malformed SRP_LOGIN_REQ (%d bytes of private data, login form %s): %v", len(req.PrivateData()), loginFormName(fam), err),
			"the peer is not an SRP initiator, or sends a login format this target does not know")
		return nil, false
	}
	log = log.With(zap.Stringer("initiator", f.InitiatorPortID), zap.Uint64("login_tag", uint64(f.Tag)))
	want := t.cfg.TargetPortID
	if t.ports[f.TargetPortID] != nil && f.TargetPortID != want {
		want = f.TargetPortID // one of MorePorts: name it, the target's log names the first
		log = log.With(zap.Stringer("login_target_port", f.TargetPortID))
	}
	if le := checkLogin(&f, want, &t.lim); le != nil {
		t.reject(req, f.Tag, le.reason, log, le.detail, le.hint)
		return nil, false
	}
	if req.ResponderResources() == 0 {
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log,
			"initiator offers no responder resources: the target could not RDMA READ data-out (SCSI WRITE)",
			"the initiator must allow RDMA READs (ib_srp offers 4)")
		return nil, false
	}
	a := &loginAttempt{req: req, fam: fam, f: f, log: log, ibSrc: ibSource(req, fam), auth: t.auth.Load()}
	if a.auth.a == nil {
		t.rejectByACL(req, f.Tag, iu.LoginRejChannelLimitReached, log, "no access control list is configured",
			"configure the initiators allowed to log in")
		return nil, false
	}
	a.m, err = authorizeFrom(a.auth.a, f.InitiatorPortID, f.TargetPortID, req.RemoteAddr(), a.ibSrc)
	if err != nil || a.m == nil {
		reason := iu.LoginRejChannelLimitReached
		detail := "initiator refused by the access control list"
		var re *LoginRefusedError
		if errors.As(err, &re) {
			reason, detail = re.Reason, re.Detail
		} else if err != nil {
			detail = err.Error()
		}
		t.rejectByACL(req, f.Tag, reason, log, detail,
			fmt.Sprintf("add initiator port %v (or %s) to an ACL of the configuration", f.InitiatorPortID, sourceName(req, fam)))
		return nil, false
	}
	return a, true
}

// joinNexus applies the login's MULTI-CHANNEL ACTION to sess, whose login lock is held: a
// channel joins the nexus's others, or replaces them (terminateChannels). It says which, or
// why the channel cannot join.
func (t *Target) joinNexus(sess *session, a *loginAttempt) (iu.LoginRspFlags, *loginError) {
	if a.f.ReqFlags.MultiChanAction() != iu.MultiChanMulti {
		if t.terminateChannels(sess, a.log) {
			return iu.LoginRspMultiChanTerminated, nil
		}
		return 0, nil
	}
	n := sess.channelCount()
	if n >= t.lim.MaxChannels {
		return 0, &loginError{reason: iu.LoginRejChannelLimitReached,
			detail: fmt.Sprintf("the I_T nexus already has %d channels (max_channels %d)", n, t.lim.MaxChannels),
			hint:   fmt.Sprintf("raise limits.max_channels or set ch_count=%d or lower on the initiator", t.lim.MaxChannels)}
	}
	if cur := sess.lunMap.Load(); n > 0 && cur != a.m && !sameMappings(cur, a.m) {
		// Access is decided per channel, as LIO and SCST decide it: a channel that joins the
		// nexus must not change the LUNs its other channels see. Initiator port identifiers
		// are not authenticated, so this is what keeps a login from another address with the
		// same identifier from taking over the nexus's LUNs.
		return 0, &loginError{reason: iu.LoginRejUnableAssociateChannel,
			detail: fmt.Sprintf("the access control list grants this login (from %v) %d LUNs, other than the %d LUNs of the nexus's %d channels",
				a.req.RemoteAddr().Addr(), len(a.m.Mappings()), len(cur.Mappings()), n),
			hint: "make every address this initiator port logs in from match the same ACL, or give each host its own initiator port id"}
	}
	if n > 0 {
		return iu.LoginRspMultiChanMaintained, nil
	}
	return 0, nil
}

// openChannel makes the channel of a login that joined sess (result: what became of the
// nexus's other channels), counted against the limits and host's share, accepts the
// connection with the SRP_LOGIN_RSP and starts the channel.
func (t *Target) openChannel(sess *session, host *source, key nexusKey, a *loginAttempt, result iu.LoginRspFlags) {
	req, f, log := a.req, &a.f, a.log
	if why := t.reg.reserveChannel(host, key); why != nil {
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log, why.detail, why.hint)
		return
	}
	reserved := true
	defer func() {
		if reserved {
			t.reg.unreserveChannel(host, key)
		}
	}()
	ch, ap, err := t.prepareChannel(sess, host, req, f, a.ibSrc)
	if err != nil {
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log, err.Error(),
			"check the memory available for registration (ulimit -l) and the device limits")
		return
	}
	var rsp [iu.LoginRspSize]byte
	flags := result
	if ch.immOff != 0 {
		flags |= iu.LoginRspImmedSupp
	}
	iu.LoginRsp(rsp[:]).Encode(&iu.LoginRspFields{
		ReqLimDelta: uint32(ch.credits),
		Tag:         f.Tag,
		MaxITIULen:  t.lim.MaxITIULen,
		MaxTIIULen:  t.lim.MaxTIIULen,
		SupBufFmt:   supportedBufFmt,
		RspFlags:    flags,
	})
	ap.PrivateData = rsp[:]
	if !t.reg.addChannel(ch) {
		ch.abortLogin()
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log, "target is shutting down", "wait for the target to restart")
		return
	}
	reserved = false
	conn, err := req.Accept(ap)
	if err != nil {
		ch.abortLogin()
		t.reg.removeChannel(ch)
		if errors.Is(err, ib.ErrAnswered) {
			log.Warn("accepting the login failed", zap.Error(err))
			return
		}
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log, "accepting the connection failed: "+err.Error(),
			"check the device limits (queue depths) against limits.credits and limits.send_queue_depth")
		return
	}
	// The session keeps its LUN map while the initiator is away, and SetAuthorizer skips
	// sessions without a channel: a reload that changed what this initiator sees is noticed
	// here, against the map of its previous login.
	sess.switchMap(a.m, "login after a configuration change")
	ch.accepted(conn)
	nch := sess.add(ch, req.RemoteAddr())
	if cur := t.auth.Load(); cur != a.auth {
		// SetAuthorizer ran after Authorize above but may have found the session without
		// this channel: apply the new authorizer now that the channel is counted.
		sess.reauthorize(cur.a)
	}
	t.stats.loginsAccepted.Add(1)
	t.stats.channelsOpen.Add(1)
	ch.start(conn)
	ch.log.Info("login accepted",
		zap.String("login_form", loginFormName(a.fam)),
		zap.Stringer("multichannel", multiChanName(f.ReqFlags.MultiChanAction(), result)),
		zap.Int("channels", nch),
		zap.Uint32("req_it_iu_len", f.ReqITIULen),
		zap.Uint32("max_it_iu_len", t.lim.MaxITIULen),
		zap.Uint32("max_ti_iu_len", t.lim.MaxTIIULen),
		zap.Int("credits", ch.credits),
		zap.Bool("immediate_data", ch.immOff != 0),
		zap.Uint16("immediate_data_offset", ch.immOff),
		zap.Int("send_queue_depth", ch.sqDepth),
		zap.Int("max_descriptors", ch.maxDesc),
		zap.Int("luns", len(a.m.Mappings())))
}

// terminateChannels ends the channels of sess for a login with MULTI-CHANNEL ACTION single
// ("start over"): they get SRP_T_LOGOUT (multi-channel action) and are disconnected, the
// nexus's commands are aborted in the logical units (I_T NEXUS LOSS OCCURRED is then
// pending), and the login waits for them to be gone. It reports whether there were any.
func (t *Target) terminateChannels(sess *session, log *zap.Logger) bool {
	old := sess.detachAll()
	if len(old) == 0 {
		return false
	}
	log.Info("login with MULTI-CHANNEL ACTION single: terminating the nexus's channels", zap.Int("channels", len(old)))
	for _, ch := range old {
		ch.requestStop(stopHard, "replaced by a login with MULTI-CHANNEL ACTION single", iu.TLogoutMultiChannelAction)
	}
	if m := sess.lunMap.Load(); m != nil {
		m.NexusReset(sess.nexus)
	}
	deadline := time.NewTimer(t.lim.DrainTimeout)
	defer deadline.Stop()
	for _, ch := range old {
		select {
		case <-ch.closedCh:
		case <-deadline.C:
			log.Warn("old channels did not close in time; logging in anyway")
			return true
		}
	}
	return true
}

// prepareChannel sizes and allocates a channel for req from host (from ibSrc when it arrived on
// an AF_IB listener) in the poll group with the fewest channels; the caller accepts.
func (t *Target) prepareChannel(sess *session, host *source, req ib.ConnRequest, f *iu.LoginReqFields, ibSrc *ib.IBAddr) (*channel, ib.AcceptParams, error) {
	lim := req.Limits()
	p := channelParams{
		// One receive beyond the credits is kept for the answer to SRP_CRED_REQ.
		credits: min(t.lim.Credits, lim.MaxQueueDepth-spareRecvs),
		sqDepth: min(t.lim.SendQueueDepth, lim.MaxQueueDepth),
		immOff:  grantImmediate(f, &t.lim),
		inline:  min(lim.MaxInlineData, int(t.lim.MaxTIIULen)),
		ibSrc:   ibSrc,
	}
	if p.credits < 2 || p.sqDepth < 2 || lim.MaxSendSGE < 1 || lim.MaxRecvSGE < 1 || lim.MaxReadSGE < 1 {
		return nil, ib.AcceptParams{}, fmt.Errorf("device limits %+v too small for a channel", lim)
	}
	p.maxDesc = min(t.lim.MaxDescriptors, p.sqDepth-1)
	p.initiatorDepth = uint8(min(int(req.ResponderResources()), lim.MaxRDAtomic, 255))
	p.respRes = uint8(min(int(req.InitiatorDepth()), lim.MaxRDAtomic, 255))
	pool, err := t.pools.get(req.PD())
	if err != nil {
		return nil, ib.AcceptParams{}, err
	}
	g := t.groupFor()
	q, err := g.reserve(req.PD(), pool, p.sqDepth, p.credits+spareRecvs, p.immOff)
	if err != nil {
		return nil, ib.AcceptParams{}, err
	}
	if q.srq != nil {
		// Credits bounded by what the shared receive queue holds (recvLimit).
		p.credits = min(p.credits, q.srq.depth-spareRecvs)
	}
	ch, err := newChannel(t, sess, host, pool, req.PD(), g, q, p, req.RemoteAddr())
	if err != nil {
		g.mu.Lock()
		g.unreserveLocked(q)
		g.mu.Unlock()
		g.load.Add(-1)
		return nil, ib.AcceptParams{}, err
	}
	ap := ib.AcceptParams{
		QP: ib.QPCaps{
			SendQueueDepth: ch.sqDepth,
			RecvQueueDepth: ch.nrecv,
			MaxSendSGE:     1,
			MaxRecvSGE:     1,
			MaxInlineData:  ch.inline,
		},
		RNRRetryCount:      ib.InfiniteRNRRetry,
		ResponderResources: p.respRes,
		InitiatorDepth:     p.initiatorDepth,
		CQ:                 q.recv.cq,
		SendCQ:             q.send.cq,
		OnQP:               func(qpn uint32) { g.registerQP(ch, qpn) },
		OnEvent:            ch.onEvent,
	}
	if q.srq != nil {
		ap.SRQ = q.srq.srq
	} else {
		ap.Recv = ch.rq.wrs
	}
	return ch, ap, nil
}

// abortLogin releases a channel prepared for a login that was not accepted after all.
func (ch *channel) abortLogin() {
	ch.release()
	ch.g.start(ch) // with no connection: the group forgets it
}

// reject answers req with an SRP_LOGIN_REJ and logs why and what to change.
func (t *Target) reject(req ib.ConnRequest, tag iu.Tag, reason iu.LoginRejReason, log *zap.Logger, detail, hint string) {
	if i := int(reason) - int(iu.LoginRejUnableEstablishChannel); i >= 0 && i < len(t.stats.rejects) {
		t.stats.rejects[i].Add(1)
	}
	t.sendReject(req, tag, reason, log, detail, hint)
}

// rejectByACL is reject for a login the access control lists refuse: counted as such
// (Stats.RejectedByACL), not under the reason on the wire, which an operator would read as a
// limit to raise.
func (t *Target) rejectByACL(req ib.ConnRequest, tag iu.Tag, reason iu.LoginRejReason, log *zap.Logger, detail, hint string) {
	t.stats.rejectedByACL.Add(1)
	t.sendReject(req, tag, reason, log, detail, hint)
}

func (t *Target) sendReject(req ib.ConnRequest, tag iu.Tag, reason iu.LoginRejReason, log *zap.Logger, detail, hint string) {
	var b [iu.LoginRejSize]byte
	iu.LoginRej(b[:]).Encode(&iu.LoginRejFields{Reason: reason, Tag: tag, SupBufFmt: supportedBufFmt})
	t.stats.loginsRejected.Add(1)
	// One line per refusal, except in a flood: per source address at most rejectLogBurst
	// lines per rejectLogEvery, then one that says how many were left out.
	if ok, suppressed := t.logLimit.Allow(req.RemoteAddr().Addr().String(), time.Now()); ok {
		fields := []zap.Field{zap.Stringer("reason", reason), zap.String("detail", detail), zap.String("fix", hint)}
		if suppressed > 0 {
			fields = append(fields, zap.Int("similar_lines_suppressed", suppressed))
		}
		log.Warn("login rejected", fields...)
	}
	if err := req.Reject(b[:]); err != nil {
		log.Warn("sending SRP_LOGIN_REJ failed", zap.Error(err))
	}
}

type multiChanResult struct {
	action iu.LoginReqFlags
	result iu.LoginRspFlags
}

func multiChanName(action iu.LoginReqFlags, result iu.LoginRspFlags) fmt.Stringer {
	return multiChanResult{action, result}
}

func (m multiChanResult) String() string {
	a := "single"
	if m.action == iu.MultiChanMulti {
		a = "multi"
	}
	switch m.result {
	case iu.LoginRspMultiChanTerminated:
		return a + ": existing channels terminated"
	case iu.LoginRspMultiChanMaintained:
		return a + ": existing channels maintained"
	}
	return a + ": no existing channels"
}
