package srptest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
)

// fakeTarget is a scripted SRP target on the in-memory fabric, just enough to exercise the
// initiator: it answers logins (or rejects them), serves a RAM disk of 512-byte blocks with
// READ/WRITE(10/16), INQUIRY, TEST UNIT READY and READ CAPACITY(16), moves data with RDMA
// READ/WRITE as LIO does (fetching external descriptor tables too), answers task management,
// and lets a test hold commands, send any IU and disconnect.
type fakeTarget struct {
	t    *testing.T
	fab  *memfabric.Fabric
	node *memfabric.Node
	ln   ib.Listener
	ibLn ib.Listener // with listenIB
	addr netip.AddrPort

	// Set before the first login.
	credits    uint32 // REQUEST LIMIT DELTA of the login response (default 32)
	maxITIULen uint32 // default 8276 (LIO's srp_max_req_size)
	noImm      bool   // do not grant immediate data
	login      func(f iu.LoginReqFields) (*iu.LoginRspFields, *iu.LoginRejFields)
	// loginRaw, if set, replaces the REP private data.
	loginRaw []byte
	// onCmd sees every SRP_CMD first; returning true means it took care of it (no response).
	onCmd func(fc *fakeChan, msg []byte) bool
	// rspDelta chooses the REQUEST LIMIT DELTA of a response (default 1 + credits owed).
	rspDelta func(fc *fakeChan) uint32
	// tmCode is the TM response code (default 0); tmNoData leaves the response data out.
	tmCode   uint8
	tmNoData bool
	// dreqOnLogout disconnects the channel as soon as SRP_I_LOGOUT arrives.
	dreqOnLogout bool
	// listenIB also listens on the port in the fabric's IB port space (AF_IB logins).
	listenIB bool

	wg     sync.WaitGroup
	cancel context.CancelFunc
	done   chan struct{} // closed by close: every goroutine of the fake target ends

	mu     sync.Mutex
	chans  []*fakeChan
	logins []iu.LoginReqFields
	privs  [][]byte // the connection requests' private data, as delivered
	disk   []byte
}

// fakeChan is one accepted channel of the fake target.
type fakeChan struct {
	ft     *fakeTarget
	conn   ib.Conn
	pd     ib.ProtectionDomain
	immOff uint16
	rxSize int
	rxMR   ib.MR
	rx     []byte
	stop   chan struct{} // the fake target's done
	req    iu.LoginReqFields

	// Owned by the channel goroutine.
	backlog []ib.Completion
	sendMRs map[uint64][]ib.MR
	nextID  uint64

	mu       sync.Mutex
	received [][]byte
	held     map[iu.Tag][]byte
	owed     uint32
	wcErrors []ib.Completion
	down     bool
	downCh   chan struct{}
	sawDREQ  bool
	actions  []func()
	wakeCh   chan struct{}
}

const fakeRxCount = 128

func newFakeTarget(t *testing.T, fab *memfabric.Fabric) *fakeTarget {
	t.Helper()
	node, err := fab.NewNode(netip.MustParseAddr("192.0.2.1"))
	require.NoError(t, err)
	ln, err := node.Listen(5555)
	require.NoError(t, err)
	ft := &fakeTarget{
		t: t, fab: fab, node: node, ln: ln, addr: ln.Addr(),
		credits: 32, maxITIULen: 8276,
		disk: make([]byte, 1<<20), done: make(chan struct{}),
	}
	return ft
}

// start runs the listener(s); call after setting the options.
func (ft *fakeTarget) start() {
	ctx, cancel := context.WithCancel(context.Background())
	ft.cancel = cancel
	lns := []ib.Listener{ft.ln}
	if ft.listenIB {
		ln, err := ft.node.ListenIB(ft.addr.Port())
		require.NoError(ft.t, err)
		ft.ibLn = ln
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		ft.wg.Add(1)
		go func() {
			defer ft.wg.Done()
			for {
				req, err := ln.Next(ctx)
				if err != nil {
					return
				}
				ft.accept(req)
			}
		}()
	}
}

// close stops everything the fake target started.
func (ft *fakeTarget) close() {
	if ft.cancel != nil {
		ft.cancel()
	}
	_ = ft.ln.Close()
	if ft.ibLn != nil {
		_ = ft.ibLn.Close()
	}
	close(ft.done)
	ft.wg.Wait()
	// No accept runs any more: every channel is in the list.
	ft.mu.Lock()
	chans := append([]*fakeChan(nil), ft.chans...)
	ft.mu.Unlock()
	for _, fc := range chans {
		_ = fc.conn.Close()
	}
}

// channel returns accepted channel i, waiting for it: Login can return before the fake
// target's Accept call has.
func (ft *fakeTarget) channel(i int) *fakeChan {
	ft.t.Helper()
	testutil.WaitFor(ft.t, "the fake target's channel", func() bool { return ft.numChans() > i })
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.chans[i]
}

func (ft *fakeTarget) numChans() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return len(ft.chans)
}

func (ft *fakeTarget) accept(req ib.ConnRequest) {
	f, err := iu.ParseLoginReq(req.PrivateData())
	if err != nil {
		ft.t.Errorf("fake target: login request: %v", err)
		_ = req.Reject(nil)
		return
	}
	ft.mu.Lock()
	ft.logins = append(ft.logins, f)
	ft.privs = append(ft.privs, append([]byte(nil), req.PrivateData()...))
	ft.mu.Unlock()
	rsp := &iu.LoginRspFields{
		ReqLimDelta: ft.credits,
		Tag:         f.Tag,
		MaxITIULen:  ft.maxITIULen,
		MaxTIIULen:  f.ReqITIULen, // LIO echoes the requested IT IU length
		SupBufFmt:   iu.BufFormatDirect | iu.BufFormatIndirect,
	}
	if f.ReqFlags&iu.ImmedRequested != 0 && !ft.noImm {
		rsp.RspFlags |= iu.LoginRspImmedSupp
	}
	if f.ReqFlags.MultiChanAction() == iu.MultiChanMulti {
		rsp.RspFlags |= iu.LoginRspMultiChanMaintained
	}
	if ft.login != nil {
		var rej *iu.LoginRejFields
		rsp, rej = ft.login(f)
		if rej != nil {
			b := make([]byte, iu.LoginRejSize)
			iu.LoginRej(b).Encode(rej)
			_ = req.Reject(b)
			return
		}
	}
	priv := make([]byte, iu.LoginRspSize)
	iu.LoginRsp(priv).Encode(rsp)
	if ft.loginRaw != nil {
		priv = ft.loginRaw
	}
	fc := &fakeChan{
		ft: ft, pd: req.PD(), rxSize: 9000, stop: ft.done, req: f,
		sendMRs: make(map[uint64][]ib.MR), held: make(map[iu.Tag][]byte), downCh: make(chan struct{}),
		wakeCh: make(chan struct{}, 1),
	}
	if rsp.RspFlags&iu.LoginRspImmedSupp != 0 {
		fc.immOff = f.ImmDataOffset
	}
	fc.rx = make([]byte, fakeRxCount*fc.rxSize)
	fc.rxMR, err = fc.pd.RegisterMemory(fc.rx, ib.AccessLocalWrite)
	require.NoError(ft.t, err)
	recvs := make([]ib.RecvWR, fakeRxCount)
	for i := range recvs {
		recvs[i] = fc.recvWR(i)
	}
	conn, err := req.Accept(ib.AcceptParams{
		PrivateData: priv,
		QP: ib.QPCaps{SendQueueDepth: 1024, RecvQueueDepth: fakeRxCount, MaxSendSGE: 16, MaxRecvSGE: 1,
			MaxInlineData: 0},
		RNRRetryCount: 7, ResponderResources: 4, InitiatorDepth: 4,
		Recv: recvs,
	})
	require.NoError(ft.t, err)
	fc.conn = conn
	ft.mu.Lock()
	ft.chans = append(ft.chans, fc)
	ft.mu.Unlock()
	ft.wg.Add(1)
	go func() {
		defer ft.wg.Done()
		fc.run()
	}()
}

func (fc *fakeChan) recvWR(i int) ib.RecvWR {
	return ib.RecvWR{ID: uint64(i), SGL: []ib.SGE{{MR: fc.rxMR, Offset: uint64(i * fc.rxSize), Length: uint32(fc.rxSize)}}}
}

// IDs of the fake target's send work requests.
const fakeSendBit = 1 << 40

func (fc *fakeChan) run() {
	for {
		select {
		case <-fc.stop:
			return
		case <-fc.conn.Ready():
		case <-fc.wakeCh:
		}
		fc.drain()
	}
}

// drain handles every completion and event available, and IUs queued by the test.
func (fc *fakeChan) drain() {
	wcs := make([]ib.Completion, 16)
	for {
		for len(fc.backlog) > 0 {
			wc := fc.backlog[0]
			fc.backlog = fc.backlog[1:]
			fc.completion(wc)
		}
		n, err := fc.conn.PollCompletions(wcs)
		if err != nil {
			fc.markDown()
			break
		}
		for _, wc := range wcs[:n] {
			fc.completion(wc)
		}
		if n < len(wcs) && len(fc.backlog) == 0 {
			break
		}
	}
	for {
		ev, ok := fc.conn.PollEvent()
		if !ok {
			break
		}
		if ev == ib.EventDisconnected {
			fc.mu.Lock()
			fc.sawDREQ = true
			fc.mu.Unlock()
			fc.markDown()
			_ = fc.conn.Disconnect()
		}
	}
	fc.mu.Lock()
	q := fc.actions
	fc.actions = nil
	fc.mu.Unlock()
	for _, f := range q {
		f()
	}
}

func (fc *fakeChan) markDown() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if !fc.down {
		fc.down = true
		close(fc.downCh)
	}
}

func (fc *fakeChan) completion(wc ib.Completion) {
	if wc.ID&fakeSendBit != 0 {
		for _, mr := range fc.sendMRs[wc.ID] {
			_ = mr.Deregister()
		}
		delete(fc.sendMRs, wc.ID)
		if wc.Status != ib.StatusSuccess {
			fc.mu.Lock()
			fc.wcErrors = append(fc.wcErrors, wc)
			fc.mu.Unlock()
			fc.markDown()
		}
		return
	}
	if wc.Status != ib.StatusSuccess {
		fc.markDown()
		return
	}
	i := int(wc.ID)
	msg := append([]byte(nil), fc.rx[i*fc.rxSize:i*fc.rxSize+int(wc.ByteLen)]...)
	_, _ = fc.conn.PostRecv([]ib.RecvWR{fc.recvWR(i)})
	fc.mu.Lock()
	fc.received = append(fc.received, msg)
	fc.mu.Unlock()
	fc.handle(msg)
}

// post SENDs iu (signaled); mrs are deregistered with its completion.
func (fc *fakeChan) post(msg []byte, mrs []ib.MR) {
	mr, err := fc.pd.RegisterMemory(append([]byte(nil), msg...), 0)
	require.NoError(fc.ft.t, err)
	fc.nextID++
	id := fakeSendBit | fc.nextID
	fc.sendMRs[id] = append(mrs, mr)
	if _, err := fc.conn.PostSend([]ib.SendWR{{ID: id, Op: ib.OpSend, Signaled: true,
		SGL: []ib.SGE{{MR: mr, Length: uint32(len(msg))}}}}); err != nil {
		for _, m := range fc.sendMRs[id] {
			_ = m.Deregister()
		}
		delete(fc.sendMRs, id)
	}
}

// rdma runs one signaled RDMA READ or WRITE and waits for it; other completions wait in the
// backlog.
func (fc *fakeChan) rdma(op ib.Opcode, local ib.MR, off uint64, length uint32, raddr uint64, rkey uint32) ib.Status {
	fc.nextID++
	id := fakeSendBit<<1 | fc.nextID
	if _, err := fc.conn.PostSend([]ib.SendWR{{ID: id, Op: op, Signaled: true,
		SGL: []ib.SGE{{MR: local, Offset: off, Length: length}}, RemoteAddr: raddr, RKey: rkey}}); err != nil {
		return ib.StatusGeneralError
	}
	wcs := make([]ib.Completion, 16)
	for {
		n, err := fc.conn.PollCompletions(wcs)
		if err != nil {
			return ib.StatusWRFlushError
		}
		for _, wc := range wcs[:n] {
			if wc.ID == id {
				for _, rest := range wcs[:n] {
					if rest.ID != id {
						fc.backlog = append(fc.backlog, rest)
					}
				}
				if wc.Status != ib.StatusSuccess {
					fc.mu.Lock()
					fc.wcErrors = append(fc.wcErrors, wc)
					fc.mu.Unlock()
				}
				return wc.Status
			}
		}
		fc.backlog = append(fc.backlog, wcs[:n]...)
		select {
		case <-fc.conn.Ready():
		case <-fc.stop:
			return ib.StatusWRFlushError
		case <-time.After(5 * time.Second):
			return ib.StatusResponseTimeoutError
		}
	}
}

// send has the channel goroutine SEND iu, and waits until it is posted.
func (fc *fakeChan) send(msg []byte) {
	msg = append([]byte(nil), msg...)
	fc.exec(func() { fc.post(msg, nil) })
}

// exec runs f on the channel goroutine and waits for it.
func (fc *fakeChan) exec(f func()) {
	done := make(chan struct{})
	fc.mu.Lock()
	fc.actions = append(fc.actions, func() { f(); close(done) })
	fc.mu.Unlock()
	select {
	case fc.wakeCh <- struct{}{}:
	default:
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		fc.ft.t.Fatal("fake target channel did not run the action")
	}
}

func (fc *fakeChan) receivedIUs() [][]byte {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([][]byte(nil), fc.received...)
}

func (fc *fakeChan) errors() []ib.Completion {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]ib.Completion(nil), fc.wcErrors...)
}

func (fc *fakeChan) heldTags() []iu.Tag {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var tags []iu.Tag
	for t := range fc.held {
		tags = append(tags, t)
	}
	return tags
}

// hold makes the channel keep commands without answering them (for onCmd).
func hold(fc *fakeChan, msg []byte) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.held[iu.Cmd(msg).Tag()] = msg
	return true
}

func (fc *fakeChan) delta() uint32 {
	if fc.ft.rspDelta != nil {
		return fc.ft.rspDelta(fc)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	d := 1 + fc.owed
	fc.owed = 0
	return d
}

func (fc *fakeChan) handle(msg []byte) {
	if len(msg) == 0 {
		return
	}
	switch iu.Opcode(msg[0]) {
	case iu.OpCmd:
		if fc.ft.onCmd != nil && fc.ft.onCmd(fc, msg) {
			return
		}
		fc.command(msg)
	case iu.OpTskMgmt:
		f, err := iu.Parse[iu.TskMgmt](msg)
		if err != nil {
			return
		}
		if f.Func == iu.TskAbortTask {
			fc.mu.Lock()
			if _, ok := fc.held[f.TaskTag]; ok {
				// LIO sends no response for an aborted command and owes its credit.
				delete(fc.held, f.TaskTag)
				fc.owed++
			}
			fc.mu.Unlock()
		}
		code := iu.TskMgmtRspCode(fc.ft.tmCode).ResponseData()
		rsp := &iu.RspFields{Tag: f.Tag, ReqLimDelta: fc.delta(), RespData: code[:]}
		if fc.ft.tmNoData {
			rsp.RespData = nil
		}
		fc.respond(rsp, nil)
	case iu.OpILogout:
		if fc.ft.dreqOnLogout {
			_ = fc.conn.Disconnect()
		}
	case iu.OpCredRsp, iu.OpAerRsp:
		// Recorded in received only.
	default:
		t := make([]byte, iu.TLogoutSize)
		iu.TLogout(t).Encode(&iu.TLogoutFields{Reason: iu.TLogoutInvalidIUType})
		fc.post(t, nil)
	}
}

func (fc *fakeChan) respond(f *iu.RspFields, mrs []ib.MR) {
	b := make([]byte, iu.RspLen(f))
	_, _ = iu.Rsp(b).Encode(f)
	fc.post(b, mrs)
}

// descriptors returns the direct descriptors of one direction, fetching an external table
// with RDMA READ as a target that supports allow_ext_sg must.
func (fc *fakeChan) descriptors(d iu.DataBuf) ([]iu.DirectBufFields, error) {
	var out []iu.DirectBufFields
	if d.External() {
		td := d.TableDescriptor()
		table := make([]byte, td.Len())
		mr, err := fc.pd.RegisterMemory(table, ib.AccessLocalWrite)
		if err != nil {
			return nil, err
		}
		defer func() { _ = mr.Deregister() }()
		if st := fc.rdma(ib.OpRDMARead, mr, 0, td.Len(), td.VA(), td.Key()); st != ib.StatusSuccess {
			return nil, fmt.Errorf("reading the descriptor table: %v", st)
		}
		for i := 0; i < len(table); i += iu.DirectBufSize {
			out = append(out, iu.DirectBuf(table[i:]).Fields())
		}
		return out, nil
	}
	for i := range d.NumDescriptors() {
		out = append(out, d.DescriptorAt(i).Fields())
	}
	return out, nil
}

func senseFixed(key, asc, ascq uint8) []byte {
	s := make([]byte, 18)
	s[0], s[2], s[7], s[12], s[13] = 0x70, key, 10, asc, ascq
	return s
}

// command executes an SRP_CMD against the RAM disk.
func (fc *fakeChan) command(msg []byte) {
	cmd := iu.Cmd(msg)
	out, in, err := cmd.DataBuffers(fc.immOff)
	if err != nil {
		fc.ft.t.Errorf("fake target: SRP_CMD: %v", err)
		return
	}
	rsp := &iu.RspFields{Tag: cmd.Tag()}
	cdb := cmd.CDB()
	var dataIn []byte
	var lba uint64
	var blocks uint64
	switch cdb[0] {
	case opTestUnitReady:
	case opInquiry:
		inq := make([]byte, 36)
		inq[2], inq[3], inq[4] = 0x06, 0x02, 31
		copy(inq[8:], "FAKE    TARGET          0001")
		dataIn = inq
	case opServiceActionIn:
		rc := make([]byte, 32)
		binary.BigEndian.PutUint64(rc, uint64(len(fc.ft.disk)/512-1))
		binary.BigEndian.PutUint32(rc[8:], 512)
		dataIn = rc
	case opRead10, opWrite10:
		lba, blocks = uint64(binary.BigEndian.Uint32(cdb[2:])), uint64(binary.BigEndian.Uint16(cdb[7:]))
	case opRead16, opWrite16:
		lba, blocks = binary.BigEndian.Uint64(cdb[2:]), uint64(binary.BigEndian.Uint32(cdb[10:]))
	default:
		rsp.Status, rsp.SenseData = 0x02, senseFixed(0x05, 0x20, 0x00)
	}
	fc.ft.mu.Lock()
	disk := fc.ft.disk
	fc.ft.mu.Unlock()
	if (lba+blocks)*512 > uint64(len(disk)) {
		rsp.Status, rsp.SenseData = 0x02, senseFixed(0x05, 0x21, 0x00)
		blocks = 0
	}
	switch cdb[0] {
	case opRead10, opRead16:
		fc.ft.mu.Lock()
		dataIn = append([]byte(nil), disk[lba*512:(lba+blocks)*512]...)
		fc.ft.mu.Unlock()
	case opWrite10, opWrite16:
		data, err := fc.fetch(out)
		if err != nil {
			fc.ft.t.Errorf("fake target: data-out: %v", err)
			return
		}
		n := min(uint64(len(data)), blocks*512)
		fc.ft.mu.Lock()
		copy(disk[lba*512:], data[:n])
		fc.ft.mu.Unlock()
		if uint64(out.Len()) < blocks*512 {
			rsp.Flags |= iu.DOUNDER
			rsp.DataOutResCnt = uint32(blocks*512 - uint64(out.Len()))
		}
	}
	var mrs []ib.MR
	if dataIn != nil && in.Present() {
		n := min(len(dataIn), int(in.Len()))
		src := dataIn[:n]
		var err error
		mrs, err = fc.place(in, src)
		if err != nil {
			fc.ft.t.Errorf("fake target: data-in: %v", err)
			return
		}
		if n < int(in.Len()) {
			rsp.Flags |= iu.DIUNDER
			rsp.DataInResCnt = in.Len() - uint32(n)
		}
	}
	rsp.ReqLimDelta = fc.delta()
	fc.respond(rsp, mrs)
}

// fetch gets the data-out bytes: immediate data, or RDMA READs of every descriptor.
func (fc *fakeChan) fetch(out iu.DataBuf) ([]byte, error) {
	if out.Format() == iu.DescImm {
		return out.ImmediateData(), nil
	}
	if !out.Present() {
		return nil, nil
	}
	descs, err := fc.descriptors(out)
	if err != nil {
		return nil, err
	}
	data := make([]byte, out.Len())
	mr, err := fc.pd.RegisterMemory(data, ib.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	defer func() { _ = mr.Deregister() }()
	off := uint64(0)
	for _, d := range descs {
		if st := fc.rdma(ib.OpRDMARead, mr, off, d.Len, d.VA, d.Key); st != ib.StatusSuccess {
			return nil, fmt.Errorf("RDMA READ: %v", st)
		}
		off += uint64(d.Len)
	}
	return data, nil
}

// place RDMA WRITEs src over the data-in descriptors (unsignaled, before the response, as LIO
// does) and returns the local region to release with the response.
func (fc *fakeChan) place(in iu.DataBuf, src []byte) ([]ib.MR, error) {
	descs, err := fc.descriptors(in)
	if err != nil {
		return nil, err
	}
	if len(src) == 0 {
		return nil, nil
	}
	mr, err := fc.pd.RegisterMemory(append([]byte(nil), src...), 0)
	if err != nil {
		return nil, err
	}
	var wrs []ib.SendWR
	off := uint64(0)
	for _, d := range descs {
		if off >= uint64(len(src)) {
			break
		}
		n := min(uint64(d.Len), uint64(len(src))-off)
		wrs = append(wrs, ib.SendWR{ID: fakeSendBit << 2, Op: ib.OpRDMAWrite,
			SGL: []ib.SGE{{MR: mr, Offset: off, Length: uint32(n)}}, RemoteAddr: d.VA, RKey: d.Key})
		off += n
	}
	if _, err := fc.conn.PostSend(wrs); err != nil {
		_ = mr.Deregister()
		return nil, err
	}
	return []ib.MR{mr}, nil
}
