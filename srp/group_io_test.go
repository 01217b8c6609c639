package srp_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// ioURingHarness starts a harness with a file LUN 0 on the io_uring engine, or skips where
// io_uring does not work here (the sync engine, which every other file LUN test covers, is
// what the daemon uses then).
func ioURingHarness(t *testing.T, opts harnessOpts) *harness {
	t.Helper()
	if _, why := srp.ResolveBackstoreIO(srp.BackstoreIOAuto); why != nil {
		t.Skipf("io_uring does not work here: %v", why)
	}
	opts.fileLUN = true
	opts.limits.BackstoreIO = srp.BackstoreIOURing
	return newHarness(t, opts)
}

// TestBackstoreIOEngines: the data commands of a file LUN on each engine, many in flight on
// two channels: what was written reads back, VERIFY and COMPARE AND WRITE compare with the
// medium, SYNCHRONIZE CACHE and a read out of range answer as they do on the sync path; with
// io_uring every command went through the group's ring, with sync none did.
func TestBackstoreIOEngines(t *testing.T) {
	for _, engine := range []srp.BackstoreIO{srp.BackstoreIOSync, srp.BackstoreIOURing} {
		t.Run(engine.String(), func(t *testing.T) {
			var h *harness
			if engine == srp.BackstoreIOURing {
				h = ioURingHarness(t, harnessOpts{})
			} else {
				h = newHarness(t, harnessOpts{fileLUN: true, limits: srp.Limits{BackstoreIO: engine}})
			}
			got, _ := h.tgt.BackstoreIO()
			require.Equal(t, engine, got)
			chs := h.loginMulti(h.cfg(), 2)
			clearUA(t, chs[0], 0)
			const qd, region = 32, 64
			var g errgroup.Group
			for ci, ch := range chs {
				for w := 0; w < qd; w++ {
					base := uint32((ci*qd + w) * region)
					g.Go(func() error {
						ctx := ctxT(t)
						for i := 0; i < 4; i++ {
							blocks := 1 + (w+i)%16
							lba := base + uint32(i*8)
							if err := writeReadBack(ctx, ch, lba, testutil.Pattern(blocks*testBlockSize, ci*1000+w*10+i), nil); err != nil {
								return err
							}
						}
						return nil
					})
				}
			}
			require.NoError(t, g.Wait())
			ch := chs[0]
			ctx := ctxT(t)
			data := testutil.Pattern(4*testBlockSize, 77)
			rsp, err := ch.Do(ctx, &srptest.Request{CDB: srptest.CDBWrite10(5000, 4), DataOut: data})
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			// VERIFY(10) with BYTCHK 1: equal, then a difference in the third block
			verify := srptest.CDBWrite10(5000, 4)
			verify[0], verify[1] = 0x2F, 0x02
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: verify, DataOut: data})
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			bad := append([]byte(nil), data...)
			bad[2*testBlockSize+5] ^= 1
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: verify, DataOut: bad})
			require.NoError(t, err)
			k, asc, _ := senseOf(t, rsp)
			require.Equal(t, []uint8{uint8(scsi.SenseMiscompare), 0x1D}, []uint8{k, asc})
			// COMPARE AND WRITE of one block
			caw := make([]byte, 16)
			caw[0], caw[9], caw[13] = 0x89, 0x88, 1 // LBA 5000 (0x1388)
			caw[8] = 0x13
			newBlock := testutil.Pattern(testBlockSize, 78)
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: caw, DataOut: append(append([]byte(nil), data[:testBlockSize]...), newBlock...)})
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead10(5000, 1), DataInLen: testBlockSize})
			require.NoError(t, err)
			require.Equal(t, newBlock, rsp.DataIn)
			// SYNCHRONIZE CACHE(10), and a read past the end
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: []byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead16(testLUNSize/testBlockSize, 1), DataInLen: testBlockSize})
			require.NoError(t, err)
			k, asc, _ = senseOf(t, rsp)
			require.Equal(t, []uint8{uint8(scsi.SenseIllegalRequest), 0x21}, []uint8{k, asc})

			started, inFlight := h.tgt.BackstoreIOCounts()
			require.Zero(t, inFlight)
			const commands = 2*qd*4*2 + 1 + 2 + 1 + 1 + 1 + 1
			if engine == srp.BackstoreIOURing {
				require.Equal(t, uint64(commands), started, "every data command went through the ring")
			} else {
				require.Zero(t, started)
			}
			h.waitIdle()
		})
	}
}

// TestBackstoreIOTaskManagement: a command whose read is in flight on the ring is waited for
// by ABORT TASK and LOGICAL UNIT RESET as one running on a worker is: the function is
// answered only once the read has completed and been handed back, and the command gets no
// response. The groups are kept from reaping meanwhile, as a slow disk would keep them.
func TestBackstoreIOTaskManagement(t *testing.T) {
	for _, tmf := range []string{"ABORT TASK", "LOGICAL UNIT RESET"} {
		t.Run(tmf, func(t *testing.T) {
			h := ioURingHarness(t, harnessOpts{})
			ch := h.login(h.cfg())
			clearUA(t, ch, 0)
			h.tgt.HoldBackstoreIO(true)
			p, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(8, 8), DataInLen: 4096})
			require.NoError(t, err)
			testutil.WaitFor(t, "the read in flight on the ring", func() bool { _, n := h.tgt.BackstoreIOCounts(); return n == 1 })
			answered := make(chan uint8, 1)
			go func() {
				var code uint8
				var err error
				if tmf == "ABORT TASK" {
					code, err = ch.Abort(ctxT(t), p)
				} else {
					code, err = ch.ResetLUN(ctxT(t), 0)
				}
				if err != nil {
					t.Error(err)
				}
				answered <- code
			}()
			select {
			case code := <-answered:
				t.Fatalf("%s answered (%d) while the command's read was pending", tmf, code)
			case <-time.After(100 * time.Millisecond):
			}
			h.tgt.HoldBackstoreIO(false)
			require.Equal(t, uint8(iu.TskMgmtSuccess), <-answered)
			require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
			if tmf == "ABORT TASK" {
				_, err = p.Wait(ctxT(t))
				require.ErrorIs(t, err, srptest.ErrForgotten)
			} else {
				// anything sent for the aborted command would have arrived before this
				requireTURSense(t, ch, 0, []uint8{uint8(scsi.SenseUnitAttention), 0x29, 0x03})
				select {
				case <-p.Done():
					t.Fatal("the aborted command got a response")
				default:
				}
				p.Forget()
			}
			require.Zero(t, ch.Stats().UnknownTags, "a response for the aborted command was sent")
			require.Equal(t, int64(128), ch.Credits())
			rsp, err := ch.Read10(ctxT(t), 0, 8, 8, testBlockSize)
			require.NoError(t, err)
			require.NoError(t, rsp.Err(), "the LUN serves on")
			h.waitIdle()
		})
	}
}

// TestBackstoreIOChannelGone: a channel that disconnects while its command's read is in flight
// on the ring is torn down only once the read is over: its buffer stays the command's until
// then, and comes back to the pool after.
func TestBackstoreIOChannelGone(t *testing.T) {
	h := ioURingHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.tgt.HoldBackstoreIO(true)
	_, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(8, 64), DataInLen: 64 * testBlockSize})
	require.NoError(t, err)
	testutil.WaitFor(t, "the read in flight on the ring", func() bool { _, n := h.tgt.BackstoreIOCounts(); return n == 1 })
	ch.Vanish()
	time.Sleep(100 * time.Millisecond)
	require.False(t, h.tgt.PoolsIdle(), "the pending read's buffer went back to the pool")
	require.Equal(t, int64(1), h.tgt.Stats().ChannelsOpen)
	h.tgt.HoldBackstoreIO(false)
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	h.waitIdle()
}

// TestBackstoreIOBlocked: commands the ring cannot take at once run on workers, as with the
// sync engine, while the ring's commands are held: more commands than the ring has room for
// (the rest complete on workers meanwhile), and an ORDERED command behind a read in flight,
// which waits on its worker until the read is over and only then writes.
func TestBackstoreIOBlocked(t *testing.T) {
	defer srp.SetGroupIODepth(4)()
	h := ioURingHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	ctx := ctxT(t)
	data := testutil.Pattern(8*8*testBlockSize, 5)
	rsp, err := ch.Do(ctx, &srptest.Request{CDB: srptest.CDBWrite10(0, 64), DataOut: data})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())

	h.tgt.HoldBackstoreIO(true)
	var ps []*srptest.Pending
	for i := 0; i < 8; i++ {
		p, err := ch.Submit(ctx, &srptest.Request{CDB: srptest.CDBRead10(uint32(i*8), 8), DataInLen: 8 * testBlockSize})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	testutil.WaitFor(t, "four reads in flight on the ring", func() bool { _, n := h.tgt.BackstoreIOCounts(); return n == 4 })
	done := func() (n int) {
		for _, p := range ps {
			select {
			case <-p.Done():
				n++
			default:
			}
		}
		return n
	}
	testutil.WaitFor(t, "the reads the ring had no room for completed on workers while it was held", func() bool { return done() == 4 })
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 4, done(), "a read held on the ring completed")
	started, inFlight := h.tgt.BackstoreIOCounts()
	require.Equal(t, 4, inFlight)
	require.Equal(t, uint64(4), started-1, "the write and four of the reads went through the ring")

	// An ORDERED WRITE behind the reads in flight waits for them on a worker.
	newData := testutil.Pattern(8*testBlockSize, 6)
	ordered, err := ch.Submit(ctx, &srptest.Request{CDB: srptest.CDBWrite10(0, 8), DataOut: newData, Attr: iu.TaskAttrOrdered})
	require.NoError(t, err)
	select {
	case <-ordered.Done():
		t.Fatal("the ORDERED write completed before the reads ahead of it")
	case <-time.After(100 * time.Millisecond):
	}
	h.tgt.HoldBackstoreIO(false)
	for i, p := range ps {
		rsp, err := p.Wait(ctx)
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		require.Equal(t, data[i*8*testBlockSize:(i+1)*8*testBlockSize], rsp.DataIn, "read %d", i)
	}
	rsp, err = ordered.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 8 * testBlockSize})
	require.NoError(t, err)
	require.Equal(t, newData, rsp.DataIn)
	h.waitIdle()
}

// TestBackstoreIOQueueFails: a poll group whose io_uring cannot be made (the kernel refuses a
// ring of that size, memory locked) says so in the log and runs its file LUN's commands on
// workers, as the sync engine does.
func TestBackstoreIOQueueFails(t *testing.T) {
	defer srp.FailGroupIOQueue(fmt.Errorf("uring: io_uring_setup: %w", unix.ENOMEM))()
	h := ioURingHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	ctx := ctxT(t)
	data := testutil.Pattern(16*testBlockSize, 9)
	rsp, err := ch.Do(ctx, &srptest.Request{CDB: srptest.CDBWrite10(100, 16), DataOut: data})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead10(100, 16), DataInLen: len(data)})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, data, rsp.DataIn)
	started, _ := h.tgt.BackstoreIOCounts()
	require.Zero(t, started)
	logged := h.logs.FilterMessage("the poll group's io_uring could not be made: its file and block LUNs use blocking calls on workers").All()
	require.Len(t, logged, 1)
	require.Contains(t, fmt.Sprint(logged[0].ContextMap()["error"]), "cannot allocate memory")
	h.waitIdle()
}
