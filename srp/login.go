package srp

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
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

// listenerFamily returns l's address family (ib.FamilyListener), or 0 when l does not say.
// The family decides the layout of the SRP_LOGIN_REQ (include/scsi/srp.h): an IP-family
// listener receives the 56-byte struct srp_login_req_rdma (RDMA/CM's own header took 36 of the
// IB CM REQ's 92 bytes; LIO converts every RDMA/CM login from this form), an AF_IB listener
// the raw REQ private data, the 64-byte struct srp_login_req first (ib_srp's
// dgid=...,service_id=0x013fPPPP). Not the length of the private data, which is ambiguous
// where the transport delivers the sender's length (iWARP) or pads it.
func listenerFamily(l ib.Listener) ib.Family {
	if fl, ok := l.(ib.FamilyListener); ok {
		return fl.Family()
	}
	return 0
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

// login answers one connection request that arrived on a listener of family fam (0:
// unknown).
func (t *Target) login(req ib.ConnRequest, fam ib.Family) {
	src := req.RemoteAddr()
	log := t.log.With(srcField(req, fam))
	f, err := parseLogin(req, fam)
	if err != nil {
		t.reject(req, 0, iu.LoginRejUnableEstablishChannel, log,
			fmt.Sprintf("malformed SRP_LOGIN_REQ (%d bytes of private data, login form %s): %v", len(req.PrivateData()), loginFormName(fam), err),
			"the peer is not an SRP initiator, or sends a login format this target does not know")
		return
	}
	log = log.With(zap.Stringer("initiator", f.InitiatorPortID), zap.Uint64("login_tag", uint64(f.Tag)))
	want := t.cfg.TargetPortID
	if t.ports[f.TargetPortID] != nil && f.TargetPortID != want {
		want = f.TargetPortID // one of MorePorts: name it, the target's log names the first
		log = log.With(zap.Stringer("login_target_port", f.TargetPortID))
	}
	if le := checkLogin(&f, want, &t.lim); le != nil {
		t.reject(req, f.Tag, le.reason, log, le.detail, le.hint)
		return
	}
	if req.ResponderResources() == 0 {
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log,
			"initiator offers no responder resources: the target could not RDMA READ data-out (SCSI WRITE)",
			"the initiator must allow RDMA READs (ib_srp offers 4)")
		return
	}
	auth := t.auth.Load()
	a := auth.a
	if a == nil {
		t.rejectByACL(req, f.Tag, iu.LoginRejChannelLimitReached, log, "no access control list is configured",
			"configure the initiators allowed to log in")
		return
	}
	ibSrc := ibSource(req, fam)
	m, err := authorizeFrom(a, f.InitiatorPortID, f.TargetPortID, src, ibSrc)
	if err != nil || m == nil {
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
		return
	}

	key := nexusKey{initiator: f.InitiatorPortID, target: f.TargetPortID}
	hostAddr := src.Addr() // the host's share is kept by its address, or its GID over AF_IB
	if ibSrc != nil {
		hostAddr = ibSrc.GID
	}
	sess, host, le := t.acquireSession(key, hostAddr)
	if le != nil {
		t.reject(req, f.Tag, le.reason, log, le.detail, le.hint)
		return
	}
	defer t.releaseSession(sess, host)
	sess.loginMu.Lock()
	defer sess.loginMu.Unlock()
	sess.waitReset()

	var result iu.LoginRspFlags
	switch f.ReqFlags.MultiChanAction() {
	case iu.MultiChanMulti:
		n := sess.channelCount()
		if n >= t.lim.MaxChannels {
			t.reject(req, f.Tag, iu.LoginRejChannelLimitReached, log,
				fmt.Sprintf("the I_T nexus already has %d channels (max_channels %d)", n, t.lim.MaxChannels),
				fmt.Sprintf("raise limits.max_channels or set ch_count=%d or lower on the initiator", t.lim.MaxChannels))
			return
		}
		if cur := sess.lunMap.Load(); n > 0 && cur != m && !sameMappings(cur, m) {
			// Access is decided per channel, as LIO and SCST decide it: a channel that
			// joins the nexus must not change the LUNs its other channels see. Initiator
			// port identifiers are not authenticated, so this is what keeps a login from
			// another address with the same identifier from taking over the nexus's LUNs.
			t.reject(req, f.Tag, iu.LoginRejUnableAssociateChannel, log,
				fmt.Sprintf("the access control list grants this login (from %v) %d LUNs, other than the %d LUNs of the nexus's %d channels",
					src.Addr(), len(m.Mappings()), len(cur.Mappings()), n),
				"make every address this initiator port logs in from match the same ACL, or give each host its own initiator port id")
			return
		}
		if n > 0 {
			result = iu.LoginRspMultiChanMaintained
		}
	default:
		if t.terminateChannels(sess, log) {
			result = iu.LoginRspMultiChanTerminated
		}
	}

	if le := t.reserveChannel(host, key); le != nil {
		t.reject(req, f.Tag, le.reason, log, le.detail, le.hint)
		return
	}
	reserved := true
	defer func() {
		if reserved {
			t.unreserveChannel(host, key)
		}
	}()
	ch, ap, err := t.prepareChannel(sess, host, req, &f, ibSrc)
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
	if !t.addChannel(ch) {
		ch.release()
		t.reject(req, f.Tag, iu.LoginRejInsufficientResources, log, "target is shutting down", "wait for the target to restart")
		return
	}
	reserved = false
	conn, err := req.Accept(ap)
	if err != nil {
		ch.release()
		t.removeChannel(ch)
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
	sess.switchMap(m, "login after a configuration change")
	ch.accepted(conn)
	nch := sess.add(ch, src)
	if cur := t.auth.Load(); cur != auth {
		// SetAuthorizer ran after Authorize above but may have found the session without
		// this channel: apply the new authorizer now that the channel is counted.
		sess.reauthorize(cur.a)
	}
	t.stats.loginsAccepted.Add(1)
	t.stats.channelsOpen.Add(1)
	ch.start(conn)
	ch.log.Info("login accepted",
		zap.String("login_form", loginFormName(fam)),
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
		zap.Int("luns", len(m.Mappings())))
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
// an AF_IB listener); the caller accepts.
func (t *Target) prepareChannel(sess *session, host *source, req ib.ConnRequest, f *iu.LoginReqFields, ibSrc *ib.IBAddr) (*channel, ib.AcceptParams, error) {
	lim := req.Limits()
	p := channelParams{
		// One receive beyond the credits is kept for the answer to SRP_CRED_REQ.
		credits: min(t.lim.Credits, lim.MaxQueueDepth-spareRecvs),
		sqDepth: min(t.lim.SendQueueDepth, lim.MaxQueueDepth),
		immOff:  grantImmediate(f, &t.lim),
		ibSrc:   ibSrc,
	}
	if p.credits < 2 || p.sqDepth < 2 || lim.MaxSendSGE < 1 || lim.MaxRecvSGE < 1 || lim.MaxReadSGE < 1 {
		return nil, ib.AcceptParams{}, fmt.Errorf("device limits %+v too small for a channel", lim)
	}
	p.maxDesc = min(t.lim.MaxDescriptors, p.sqDepth-1)
	p.initiatorDepth = uint8(min(int(req.ResponderResources()), lim.MaxRDAtomic, 255))
	p.respRes = uint8(min(int(req.InitiatorDepth()), lim.MaxRDAtomic, 255))
	pool, err := t.pool(req.PD())
	if err != nil {
		return nil, ib.AcceptParams{}, err
	}
	ch, err := newChannel(t, sess, host, pool, req.PD(), p, req.RemoteAddr())
	if err != nil {
		return nil, ib.AcceptParams{}, err
	}
	ap := ib.AcceptParams{
		QP: ib.QPCaps{
			SendQueueDepth: ch.sqDepth,
			RecvQueueDepth: ch.nrecv,
			MaxSendSGE:     1,
			MaxRecvSGE:     1,
		},
		RNRRetryCount:      ib.InfiniteRNRRetry,
		ResponderResources: p.respRes,
		InitiatorDepth:     p.initiatorDepth,
		Recv:               ch.recvWRs,
	}
	return ch, ap, nil
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
