package srptest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
)

func encodeIU(t *testing.T, n int, enc func(b []byte) (int, error)) []byte {
	t.Helper()
	b := make([]byte, n)
	m, err := enc(b)
	require.NoError(t, err)
	return b[:m]
}

func findOpcode(ius [][]byte, op iu.Opcode) [][]byte {
	var out [][]byte
	for _, msg := range ius {
		if len(msg) > 0 && iu.Opcode(msg[0]) == op {
			out = append(out, msg)
		}
	}
	return out
}

// stingyTarget is a fake target that grants credits at login and never any more.
func stingyTarget(t *testing.T, credits uint32) (*memfabric.Fabric, *fakeTarget) {
	return setup(t, memfabric.Options{}, func(ft *fakeTarget) {
		ft.credits = credits
		ft.rspDelta = func(*fakeChan) uint32 { return 0 }
	})
}

// Credits follow ib_srp exactly: -1 per SRP_CMD / SRP_TSK_MGMT, + every REQUEST LIMIT DELTA;
// commands wait while one credit is left, task management takes it and fails without it.
func TestCreditAccounting(t *testing.T) {
	fab, ft := stingyTarget(t, 3)
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr})
	require.Equal(t, 2, ch.CanQueue(), "min(3 - 1, 64 - 2)")
	fc := ft.channel(0)

	for want := int64(2); want >= 1; want-- {
		rsp, err := ch.TestUnitReady(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, uint32(0), rsp.ReqLimDelta)
		require.Equal(t, want, ch.Credits())
	}

	// One credit left: it is kept for task management, the command waits.
	type result struct {
		rsp *Response
		err error
	}
	blocked := make(chan result, 1)
	go func() {
		rsp, err := ch.TestUnitReady(ctx, 0)
		blocked <- result{rsp, err}
	}()
	testutil.WaitFor(t, "the command to wait for a credit", func() bool { return ch.Stats().ZeroReqLim == 1 })
	require.Len(t, fc.receivedIUs(), 2)

	code, err := ch.ResetLUN(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, uint8(0), code)
	require.Equal(t, int64(0), ch.Credits())
	tm := findOpcode(fc.receivedIUs(), iu.OpTskMgmt)
	require.Len(t, tm, 1)
	require.Equal(t, []byte{
		0x01, 0, 0, 0, 0, 0, 0, 0, // SRP_TSK_MGMT
		0x01, 0x00, 0x00, 0x80, 0, 0, 0, 0, // tag (0 + 1) | SRP_TAG_TSK_MGMT, host order
		0, 0, 0, 0, // reserved
		0x00, 0x05, 0, 0, 0, 0, 0, 0, // LUN 5
		0, 0, // reserved
		0x08,                               // LOGICAL UNIT RESET
		0,                                  // reserved
		0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, // task tag SRP_TAG_NO_REQ, host order
		0, 0, 0, 0, 0, 0, 0, 0,
	}, tm[0])

	// No credit at all: task management fails at once, as in ib_srp.
	_, err = ch.TaskMgmt(ctx, iu.TskAbortTaskSet, 0, 0)
	require.ErrorIs(t, err, ErrNoCredits)
	require.Equal(t, uint64(2), ch.Stats().ZeroReqLim)

	// SRP_CRED_REQ: answered with SRP_CRED_RSP (no credit), delta added, the command goes.
	fc.send(encodeIU(t, iu.CredReqSize, func(b []byte) (int, error) {
		return iu.CredReq(b).Encode(&iu.CredReqFields{ReqLimDelta: 2, Tag: 0x7777}), nil
	}))
	select {
	case r := <-blocked:
		require.NoError(t, r.err)
		require.NoError(t, r.rsp.Err())
	case <-time.After(5 * time.Second):
		t.Fatal("the command did not go after SRP_CRED_REQ")
	}
	require.Equal(t, int64(1), ch.Credits(), "0 + 2 - 1 + 0")
	testutil.WaitFor(t, "SRP_CRED_RSP", func() bool { return len(findOpcode(fc.receivedIUs(), iu.OpCredRsp)) == 1 })
	require.Equal(t, []byte{0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x77, 0x77},
		findOpcode(fc.receivedIUs(), iu.OpCredRsp)[0])

	// SRP_AER_REQ: answered with SRP_AER_RSP, delta added.
	fc.send(encodeIU(t, 64, func(b []byte) (int, error) {
		return iu.AerReq(b).Encode(&iu.AerReqFields{ReqLimDelta: 3, Tag: 0x0102, LUN: encodeLUN(1),
			SenseData: senseFixed(0x06, 0x2a, 0x09)})
	}))
	testutil.WaitFor(t, "SRP_AER_RSP", func() bool { return len(findOpcode(fc.receivedIUs(), iu.OpAerRsp)) == 1 })
	require.Equal(t, []byte{0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x02},
		findOpcode(fc.receivedIUs(), iu.OpAerRsp)[0])
	require.Equal(t, int64(4), ch.Credits())

	// An SRP_RSP nobody asked for: its credits count all the same.
	fc.send(encodeIU(t, iu.RspMinSize, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{ReqLimDelta: 5, Tag: 0xdead})
	}))
	testutil.WaitFor(t, "the unknown response", func() bool { return ch.Stats().UnknownTags == 1 })
	require.Equal(t, int64(9), ch.Credits())

	for _, op := range []iu.Opcode{iu.OpCredReq, iu.OpAerReq, iu.OpRsp} {
		msg, err := ch.NextUnsolicited(ctx)
		require.NoError(t, err)
		require.Equal(t, op, iu.Opcode(msg[0]))
	}
	st := ch.Stats()
	require.Equal(t, Stats{Credits: 9, ZeroReqLim: 2, Commands: 3, TaskMgmts: 1, Responses: 5, UnknownTags: 1,
		CredReqs: 1, AerReqs: 1}, st)
	require.Empty(t, ch.ProtocolErrors())
	// Credit answers never took a credit: 3 commands and 1 TM are all the target saw.
	require.Equal(t, 3, len(findOpcode(fc.receivedIUs(), iu.OpCmd)))
}

// The number of commands in flight never exceeds can_queue, whatever the credits.
func TestCanQueueLimit(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) { ft.onCmd = hold })
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr, QueueDepth: 6})
	require.Equal(t, 4, ch.CanQueue(), "min(32 - 1, 6 - 2)")
	var pend []*Pending
	for range 4 {
		p, err := ch.Submit(ctx, &Request{CDB: CDBTestUnitReady()})
		require.NoError(t, err)
		pend = append(pend, p)
	}
	// Tags 0..3 of hardware queue 0, host order.
	for i, p := range pend {
		require.Equal(t, LinuxTag(uint64(i)), p.Tag())
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := ch.Submit(short, &Request{CDB: CDBTestUnitReady()})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int64(28), ch.Credits(), "the refused command took nothing")
	require.Equal(t, uint64(0), ch.Stats().ZeroReqLim, "waiting for a tag is not waiting for credit")
	require.Equal(t, 4, ch.Outstanding())
}

func TestAbort(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) {
		ft.onCmd = func(fc *fakeChan, msg []byte) bool {
			if iu.Cmd(msg).CDB()[0] == opRead10 {
				return hold(fc, msg)
			}
			return false
		}
	})
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr})
	fc := ft.channel(0)

	p, err := ch.Submit(ctx, &Request{LUN: 2, CDB: CDBRead10(0, 1), DataInLen: 512})
	require.NoError(t, err)
	testutil.WaitFor(t, "the target to hold the read", func() bool { return len(fc.heldTags()) == 1 })
	require.Equal(t, int64(31), ch.Credits())

	code, err := ch.Abort(ctx, p)
	require.NoError(t, err)
	require.Equal(t, uint8(0), code)
	_, err = p.Wait(ctx)
	require.ErrorIs(t, err, ErrForgotten)
	require.Empty(t, fc.heldTags())
	// LIO-style: no response to the aborted command, its credit comes back with the TM
	// response (delta 1 + 1 owed).
	require.Equal(t, int64(32), ch.Credits())
	tm := findOpcode(fc.receivedIUs(), iu.OpTskMgmt)[0]
	require.Equal(t, byte(iu.TskAbortTask), tm[30])
	require.Equal(t, []byte{0x00, 0x02, 0, 0, 0, 0, 0, 0}, tm[20:28], "the command's LUN")
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0}, tm[32:40], "the command's tag, hardware queue 0 tag 0")
	require.Equal(t, uint64(1), ch.Stats().Forgotten)

	// Explicit tags: sent as given, and refused while in flight.
	p, err = ch.Submit(ctx, &Request{CDB: CDBRead10(0, 1), DataInLen: 512, Tag: 0x1122334455667788})
	require.NoError(t, err)
	_, err = ch.Submit(ctx, &Request{CDB: CDBTestUnitReady(), Tag: 0x1122334455667788})
	require.ErrorIs(t, err, ErrTagInUse)
	testutil.WaitFor(t, "the target to hold the read", func() bool { return len(fc.heldTags()) == 1 })
	require.Equal(t, []iu.Tag{0x1122334455667788}, fc.heldTags())
	code, err = ch.TaskMgmt(ctx, iu.TskAbortTask, 0, p.Tag())
	require.NoError(t, err)
	require.Equal(t, uint8(0), code)
	p.Forget()
}

func TestTaskMgmtResponses(t *testing.T) {
	ctx, ft, ch := loggedIn(t, func(ft *fakeTarget) { ft.tmCode = uint8(iu.TskMgmtFuncNotSupp) })
	code, err := ch.TaskMgmt(ctx, iu.TskClearACA, 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtFuncNotSupp), code)

	// Task management tags increase: the second is 0x80000002 in host order.
	_, err = ch.TaskMgmt(ctx, iu.TskClearACA, 0, 0)
	require.NoError(t, err)
	tms := findOpcode(ft.channel(0).receivedIUs(), iu.OpTskMgmt)
	require.Equal(t, []byte{0x02, 0x00, 0x00, 0x80, 0, 0, 0, 0}, tms[1][8:16])
}

func TestTaskMgmtWithoutResponseData(t *testing.T) {
	ctx, ft, ch := loggedIn(t, func(ft *fakeTarget) { ft.tmNoData = true })
	_, err := ch.ResetLUN(ctx, 0)
	require.ErrorIs(t, err, ErrProtocol)
	errs := ch.ProtocolErrors()
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "0 bytes of response data")
	require.Equal(t, int64(32), ch.Credits())

	// A second answer to the same tag is "too late": an unknown tag whose credits count.
	tag := iu.TskMgmt(findOpcode(ft.channel(0).receivedIUs(), iu.OpTskMgmt)[0]).Tag()
	ft.channel(0).send(encodeIU(t, iu.RspMinSize, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{ReqLimDelta: 1, Tag: tag})
	}))
	testutil.WaitFor(t, "the late TM response", func() bool { return ch.Stats().UnknownTags == 1 })
	require.Equal(t, int64(33), ch.Credits())
}

// A context that ends while a command is in flight forgets it: its buffers are gone and the
// late response counts as an unknown tag, but its credits still count.
func TestDoContextEnds(t *testing.T) {
	ctx, ft, ch := loggedIn(t, func(ft *fakeTarget) { ft.onCmd = hold })
	fc := ft.channel(0)

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := ch.Do(short, &Request{CDB: CDBRead10(0, 1), DataInLen: 512})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, uint64(1), ch.Stats().Forgotten)
	require.Zero(t, ch.Outstanding())
	require.Equal(t, int64(31), ch.Credits())

	held := fc.heldTags()
	require.Len(t, held, 1)
	fc.send(encodeIU(t, iu.RspMinSize, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{ReqLimDelta: 1, Tag: held[0]})
	}))
	testutil.WaitFor(t, "the late response", func() bool { return ch.Stats().UnknownTags == 1 })
	require.Equal(t, int64(32), ch.Credits())
}

func TestTargetLogout(t *testing.T) {
	ctx, ft, ch := loggedIn(t, nil)
	_, ok := ch.TargetLogoutReason()
	require.False(t, ok)
	ft.channel(0).send(encodeIU(t, iu.TLogoutSize, func(b []byte) (int, error) {
		return iu.TLogout(b).Encode(&iu.TLogoutFields{Reason: iu.TLogoutInactive, Tag: 9}), nil
	}))
	select {
	case <-ch.TargetLogout():
	case <-time.After(5 * time.Second):
		t.Fatal("no SRP_T_LOGOUT")
	}
	f, ok := ch.TargetLogoutReason()
	require.True(t, ok)
	require.Equal(t, iu.TLogoutFields{Reason: iu.TLogoutInactive, Tag: 9}, f)
	// ib_srp ignores it: the channel keeps working.
	rsp, err := ch.TestUnitReady(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	msg, err := ch.NextUnsolicited(ctx)
	require.NoError(t, err)
	require.Equal(t, byte(0x80), msg[0])
	require.Equal(t, uint64(1), ch.Stats().TLogouts)
}

func TestSendRaw(t *testing.T) {
	ctx, ft, ch := loggedIn(t, nil)

	// An unknown initiator opcode: the fake target answers SRP_T_LOGOUT "invalid IU type".
	require.NoError(t, ch.SendRaw([]byte{0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}))
	msg, err := ch.NextUnsolicited(ctx)
	require.NoError(t, err)
	f, err := iu.Parse[iu.TLogout](msg)
	require.NoError(t, err)
	require.Equal(t, iu.TLogoutInvalidIUType, f.Reason)
	require.Equal(t, int64(31), ch.Credits(), "a request IU takes a credit")

	// A raw SRP_CMD: its SRP_RSP has a tag nobody waits for.
	cmd := encodeIU(t, 64, func(b []byte) (int, error) {
		return iu.Cmd(b).Encode(&iu.CmdFields{Tag: 0xabc, CDB: [16]byte{opTestUnitReady}})
	})
	require.NoError(t, ch.SendRaw(cmd))
	msg, err = ch.NextUnsolicited(ctx)
	require.NoError(t, err)
	require.Equal(t, iu.Tag(0xabc), iu.Rsp(msg).Tag())
	require.Equal(t, int64(31), ch.Credits(), "-1 for the command, +1 from its response")

	// An initiator response takes no credit.
	require.NoError(t, ch.SendRaw(encodeIU(t, 16, func(b []byte) (int, error) {
		return iu.CredRsp(b).Encode(&iu.CredRspFields{Tag: 1}), nil
	})))
	testutil.WaitFor(t, "the raw SRP_CRED_RSP", func() bool {
		return len(findOpcode(ft.channel(0).receivedIUs(), iu.OpCredRsp)) == 1
	})
	require.Equal(t, int64(31), ch.Credits())
	require.Equal(t, uint64(3), ch.Stats().RawIUs)
	require.ErrorIs(t, ch.SendRaw(nil), ErrConfig)
}

func TestConcurrentDo(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "async"}[async], func(t *testing.T) {
			fab, ft := setup(t, memfabric.Options{Async: async}, func(ft *fakeTarget) { ft.credits = 6 })
			ctx := testCtx(t)
			ch := mustLogin(t, fab, Config{Addr: ft.addr})
			layouts := []Layout{nil, Direct{}, Indirect{N: 3}, Immediate{}}
			var eg errgroup.Group
			for g := range 16 {
				eg.Go(func() error {
					for i := range 20 {
						lba := uint64(g*64 + i)
						data := testutil.Pattern(512, g*20+i)
						rsp, err := ch.Do(ctx, &Request{CDB: CDBWrite16(lba, 1), DataOut: data, Layout: layouts[i%4]})
						if err == nil {
							err = rsp.Err()
						}
						if err == nil {
							rsp, err = ch.Do(ctx, &Request{CDB: CDBRead16(lba, 1), DataInLen: 512, Layout: layouts[(i+1)%4&1]})
						}
						if err == nil && string(rsp.DataIn) != string(data) {
							err = errors.New("data mismatch")
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
			}
			require.NoError(t, eg.Wait())
			require.Equal(t, int64(6), ch.Credits())
			require.Zero(t, ch.Outstanding())
			// can_queue = credits - 1: the tags run out before the reserve credit is touched.
			require.Zero(t, ch.Stats().ZeroReqLim)
			require.Equal(t, uint64(16*20*2), ch.Stats().Commands)
		})
	}
}
