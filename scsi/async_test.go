package scsi

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
)

// The asynchronous path (async.go) against the synchronous one: every case runs on two
// logical units over two files with the same content and the same faults, once through
// Execute and once through Start, Complete and Continue on a backstore.Queue, and both must
// give the same status, sense data, data-in, transfer length and file content.

const asyncBlocks, asyncBS = 4096, 512

// asyncSide is one of the two logical units of a case.
type asyncSide struct {
	path string
	file *backstore.File
	f    *faultstore.Async
	lu   *LogicalUnit
	m    *LUNMap
}

func newAsyncSide(t *testing.T, readOnlyMapping bool, mod func(*Config)) *asyncSide {
	t.Helper()
	s := &asyncSide{path: filepath.Join(t.TempDir(), "lu.img")}
	require.NoError(t, os.WriteFile(s.path, testutil.Pattern(asyncBlocks*asyncBS, 7), 0o600))
	var err error
	s.file, err = backstore.OpenFile(s.path, backstore.FileOptions{LogicalBlockSize: asyncBS})
	require.NoError(t, err)
	s.f = faultstore.NewAsync(s.file)
	cfg := Config{Backstore: s.f, Serial: "a1b2c3d4-0003", WriteCache: true}
	if mod != nil {
		mod(&cfg)
	}
	s.lu, err = NewLogicalUnit(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.lu.Close() })
	require.True(t, s.lu.Async())
	s.m, err = NewLUNMap([]Mapping{{LUN: 0, LU: s.lu, ReadOnly: readOnlyMapping}})
	require.NoError(t, err)
	clearPowerOnUA(t, s.m, testNexus)
	return s
}

// newTestQueue returns a queue, or skips where the kernel refuses io_uring (the daemon then
// uses Execute alone, which every other test covers).
func newTestQueue(t *testing.T) *backstore.Queue {
	t.Helper()
	q, err := backstore.NewQueue(8, false)
	if errors.Is(err, backstore.ErrAsyncUnsupported) {
		t.Skipf("io_uring not available: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	return q
}

// reapOne submits what is queued and waits for the completion of the request tagged tag.
func reapOne(t *testing.T, q *backstore.Queue, tag uint64) error {
	t.Helper()
	require.NoError(t, q.Submit())
	var err error
	for n := 0; n == 0; {
		n = q.Reap(func(c backstore.Completion) {
			require.Equal(t, tag, c.Tag)
			err = c.Err
		})
		if n == 0 {
			require.NoError(t, q.Wait())
		}
	}
	return err
}

// runAsync takes c through Start and Complete as a poll loop does, and through Continue when
// it comes back Blocked; it returns the progress after each step.
func runAsync(t *testing.T, m *LUNMap, c *Command, q *backstore.Queue) []Progress {
	t.Helper()
	var seen []Progress
	for p := m.Start(c, q, 42); ; p = m.Complete(c, reapOne(t, q, 42)) {
		seen = append(seen, p)
		switch p {
		case Done:
			return seen
		case Blocked:
			m.Continue(c)
			return seen
		}
	}
}

// repeat is n times p, for the expected course of a command.
func repeat(p Progress, n int) []Progress {
	s := make([]Progress, n)
	for i := range s {
		s[i] = p
	}
	return s
}

// course is the expected course of a command, its parts in order.
func course(parts ...[]Progress) []Progress { return slices.Concat(parts...) }

var (
	pd      = []Progress{Pending, Done}
	ppd     = []Progress{Pending, Pending, Done}
	onlyEnd = []Progress{Done}
)

func cdb6(op byte, lba uint32, n byte) []byte {
	return []byte{op, byte(lba >> 16 & 0x1F), byte(lba >> 8), byte(lba), n, 0}
}

// blocksOf returns the content the files start with, blocks [lba, lba+n).
func blocksOf(lba, n int) []byte {
	return testutil.Pattern(asyncBlocks*asyncBS, 7)[lba*asyncBS : (lba+n)*asyncBS]
}

// changed returns a copy of p with byte i flipped.
func changed(p []byte, i int) []byte {
	q := append([]byte(nil), p...)
	q[i] ^= 0xFF
	return q
}

// sameBlock is a setup that writes block 0's content over blocks [lba, lba+n).
func sameBlock(lba, n int) func(*testing.T, *asyncSide) {
	return func(t *testing.T, s *asyncSide) {
		for i := 0; i < n; i++ {
			require.NoError(t, s.file.WriteAt(blocksOf(0, 1), int64(lba+i)*asyncBS, false))
		}
	}
}

func inject(op faultstore.Op, lba, n int, err error) func(*testing.T, *asyncSide) {
	return func(t *testing.T, s *asyncSide) { s.f.Inject(op, int64(lba)*asyncBS, int64(n)*asyncBS, err) }
}

func TestAsyncMatchesSync(t *testing.T) {
	q := newTestQueue(t)
	cases := []struct {
		name     string
		cdb      []byte
		out      []byte
		in       int
		attr     TaskAttribute
		readOnly bool
		mod      func(*Config)
		setup    func(*testing.T, *asyncSide)
		want     []Progress // the asynchronous course
	}{
		{name: "READ(10)", cdb: cdb10(0x28, 0, 5, 8), in: 8 * asyncBS, want: pd},
		{name: "READ(6) of 256 blocks", cdb: cdb6(0x08, 100, 0), in: 256 * asyncBS, want: pd},
		{name: "READ(16) ORDERED", cdb: cdb16(0x88, 0, 4000, 96), in: 96 * asyncBS, attr: TaskOrdered, want: pd},
		{name: "READ(12) HEAD OF QUEUE", cdb: cdb12(0xA8, 0, 1, 1), in: asyncBS, attr: TaskHeadOfQueue, want: pd},
		{name: "READ out of range", cdb: cdb16(0x88, 0, 4090, 8), in: 8 * asyncBS, want: onlyEnd},
		{name: "READ into a short buffer", cdb: cdb10(0x28, 0, 0, 8), in: 1500, want: pd},
		{name: "READ into less than a block", cdb: cdb10(0x28, 0, 0, 8), in: 100, want: onlyEnd},
		{name: "READ of no blocks", cdb: cdb10(0x28, 0, 3, 0), in: 0, want: onlyEnd},
		{name: "READ with a reserved bit", cdb: cdb10(0x28, 0x04, 0, 1), in: asyncBS, want: onlyEnd},
		{name: "READ with ACA", cdb: cdb10(0x28, 0, 0, 1), in: asyncBS, attr: TaskACA, want: onlyEnd},
		{name: "READ EIO", cdb: cdb12(0xA8, 0, 8, 4), in: 4 * asyncBS, setup: inject(faultstore.OpRead, 10, 1, syscall.EIO), want: pd},
		{name: "READ ETIMEDOUT", cdb: cdb10(0x28, 0, 8, 4), in: 4 * asyncBS, setup: inject(faultstore.OpRead, 8, 1, syscall.ETIMEDOUT), want: pd},
		{name: "READ with a unit attention", cdb: cdb10(0x28, 0, 0, 1), in: asyncBS,
			setup: func(_ *testing.T, s *asyncSide) { s.lu.EstablishUA(nil, ReasonCapacityDataHasChanged) }, want: onlyEnd},
		{name: "READ past the end of a file that shrank", cdb: cdb10(0x28, 0, 100, 2), in: 2 * asyncBS,
			setup: func(t *testing.T, s *asyncSide) { require.NoError(t, os.Truncate(s.path, 8192)) }, want: pd},
		{name: "READ of a closed store", cdb: cdb10(0x28, 0, 100, 2), in: 2 * asyncBS,
			setup: func(t *testing.T, s *asyncSide) { require.NoError(t, s.file.Close()) }, want: onlyEnd},
		{name: "READ under another's exclusive access reservation", cdb: cdb10(0x28, 0, 0, 1), in: asyncBS,
			setup: func(t *testing.T, s *asyncSide) {
				clearPowerOnUA(t, s.m, otherNexus)
				key := []byte{0, 0, 0, 0, 0, 0, 0, 9}
				reg := make([]byte, 24)
				copy(reg[8:], key)
				require.Equal(t, StatusGood, run(s.m, otherNexus, 0, []byte{0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0}, reg, 0).Status)
				res := make([]byte, 24)
				copy(res, key)
				require.Equal(t, StatusGood, run(s.m, otherNexus, 0, []byte{0x5F, 0x01, 0x03, 0, 0, 0, 0, 0, 24, 0}, res, 0).Status)
			}, want: onlyEnd},

		{name: "WRITE(10) FUA", cdb: cdb10(0x2A, 0x08, 7, 4), out: testutil.Pattern(4*asyncBS, 1), want: pd},
		{name: "WRITE(6)", cdb: cdb6(0x0A, 2000, 3), out: testutil.Pattern(3*asyncBS, 2), want: pd},
		{name: "WRITE(16) without the write cache", cdb: cdb16(0x8A, 0, 4095, 1), out: testutil.Pattern(asyncBS, 3),
			mod: func(c *Config) { c.WriteCache = false }, want: pd},
		{name: "WRITE with too little data-out", cdb: cdb10(0x2A, 0, 7, 4), out: testutil.Pattern(3*asyncBS, 1), want: onlyEnd},
		{name: "WRITE of no blocks", cdb: cdb10(0x2A, 0, 7, 0), want: onlyEnd},
		{name: "WRITE ENOSPC", cdb: cdb10(0x2A, 0, 7, 4), out: testutil.Pattern(4*asyncBS, 1),
			setup: inject(faultstore.OpWrite, 9, 1, syscall.ENOSPC), want: pd},
		{name: "WRITE through a read-only mapping", cdb: cdb10(0x2A, 0, 7, 1), out: testutil.Pattern(asyncBS, 1), readOnly: true, want: onlyEnd},

		{name: "SYNCHRONIZE CACHE(10)", cdb: cdb10(0x35, 0, 0, 0), want: pd},
		{name: "SYNCHRONIZE CACHE(16) EIO", cdb: cdb16(0x91, 0, 0, 0), setup: inject(faultstore.OpFlush, 0, 0, syscall.EIO), want: pd},
		{name: "SYNCHRONIZE CACHE out of range", cdb: cdb10(0x35, 0, 4096, 1), want: onlyEnd},

		{name: "VERIFY(10) of the medium, three chunks", cdb: cdb10(0x2F, 0, 10, 600), want: course(repeat(Pending, 3), onlyEnd)},
		{name: "VERIFY(12) BYTCHK 1, equal", cdb: cdb12(0xAF, 0x02, 20, 8), out: blocksOf(20, 8), want: pd},
		{name: "VERIFY(16) BYTCHK 1, a difference in the second chunk", cdb: cdb16(0x8F, 0x02, 10, 600),
			out: changed(blocksOf(10, 600), 300*asyncBS+7), want: ppd},
		{name: "VERIFY BYTCHK 3, equal", cdb: cdb10(0x2F, 0x06, 50, 16), out: blocksOf(0, 1), setup: sameBlock(50, 16), want: pd},
		{name: "VERIFY BYTCHK 3, a difference", cdb: cdb10(0x2F, 0x06, 50, 16), out: blocksOf(0, 1), setup: sameBlock(50, 15), want: pd},
		{name: "VERIFY of the medium, an unreadable block in the second chunk", cdb: cdb10(0x2F, 0, 10, 600),
			setup: inject(faultstore.OpRead, 270, 1, syscall.EIO), want: course(repeat(Pending, 2+5), onlyEnd)},
		{name: "VERIFY BYTCHK 2", cdb: cdb10(0x2F, 0x04, 10, 1), want: onlyEnd},
		{name: "VERIFY of no blocks", cdb: cdb10(0x2F, 0, 10, 0), want: onlyEnd},

		{name: "WRITE AND VERIFY(10)", cdb: cdb10(0x2E, 0, 30, 8), out: testutil.Pattern(8*asyncBS, 4), want: ppd},
		{name: "WRITE AND VERIFY(16) BYTCHK 1", cdb: cdb16(0x8E, 0x02, 30, 300), out: testutil.Pattern(300*asyncBS, 4),
			want: course(repeat(Pending, 3), onlyEnd)},
		{name: "WRITE AND VERIFY, the write fails", cdb: cdb10(0x2E, 0, 30, 8), out: testutil.Pattern(8*asyncBS, 4),
			setup: inject(faultstore.OpWrite, 30, 1, syscall.EIO), want: pd},
		{name: "WRITE AND VERIFY, the read back fails", cdb: cdb12(0xAE, 0, 30, 8), out: testutil.Pattern(8*asyncBS, 4),
			setup: inject(faultstore.OpRead, 33, 1, syscall.EIO), want: course(repeat(Pending, 2+4), onlyEnd)},

		{name: "COMPARE AND WRITE", cdb: cawCDB(0, 40, 2), out: append(blocksOf(40, 2), testutil.Pattern(2*asyncBS, 5)...), want: ppd},
		{name: "COMPARE AND WRITE FUA", cdb: cawCDB(0x08, 40, 1), out: append(blocksOf(40, 1), testutil.Pattern(asyncBS, 5)...), want: ppd},
		{name: "COMPARE AND WRITE, a miscompare", cdb: cawCDB(0, 40, 2), out: append(changed(blocksOf(40, 2), 700), testutil.Pattern(2*asyncBS, 5)...), want: pd},
		{name: "COMPARE AND WRITE, the read fails", cdb: cawCDB(0, 40, 2), out: append(blocksOf(40, 2), testutil.Pattern(2*asyncBS, 5)...),
			setup: inject(faultstore.OpRead, 41, 1, syscall.EIO), want: pd},
		{name: "COMPARE AND WRITE, the write fails", cdb: cawCDB(0, 40, 2), out: append(blocksOf(40, 2), testutil.Pattern(2*asyncBS, 5)...),
			setup: inject(faultstore.OpWrite, 41, 1, syscall.EIO), want: ppd},
		{name: "COMPARE AND WRITE of no blocks", cdb: cawCDB(0, 40, 0), want: onlyEnd},

		{name: "INQUIRY, which has no asynchronous path", cdb: []byte{0x12, 0, 0, 0, 96, 0}, in: 96, want: []Progress{Blocked}},
		{name: "WRITE SAME, which has no asynchronous path", cdb: cdb10(0x41, 0, 60, 4), out: testutil.Pattern(asyncBS, 6), want: []Progress{Blocked}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sides := [2]*asyncSide{newAsyncSide(t, tc.readOnly, tc.mod), newAsyncSide(t, tc.readOnly, tc.mod)}
			var cmds [2]*Command
			for i, s := range sides {
				if tc.setup != nil {
					tc.setup(t, s)
				}
				cmds[i] = &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 5, Attr: tc.attr, CDB: tc.cdb,
					DataOut: append([]byte(nil), tc.out...), DataIn: make([]byte, tc.in)}
			}
			sides[0].m.Execute(cmds[0])
			require.Equal(t, tc.want, runAsync(t, sides[1].m, cmds[1], q))
			sync, async := cmds[0], cmds[1]
			require.Equal(t, sync.Status, async.Status)
			require.Equal(t, sync.SenseData(), async.SenseData())
			require.Equal(t, sync.DataInLength, async.DataInLength)
			require.Equal(t, sync.TransferLength, async.TransferLength)
			require.Equal(t, sync.DataIn, async.DataIn)
			require.Zero(t, q.InFlight())
			a, err := os.ReadFile(sides[0].path)
			require.NoError(t, err)
			b, err := os.ReadFile(sides[1].path)
			require.NoError(t, err)
			require.True(t, string(a) == string(b), "the files differ")
			for _, s := range sides {
				require.Nil(t, s.lu.tasks.list.head, "the task set is empty")
			}
			t.Logf("%v, sense % x", sync.Status, sync.SenseData())
		})
	}
}

// TestAsyncBlocked: a command that would have to wait comes back Blocked, without waiting,
// and Continue finishes it once it may run: behind an ORDERED command, and for an LBA range a
// COMPARE AND WRITE holds.
func TestAsyncBlocked(t *testing.T) {
	q := newTestQueue(t)
	s := newAsyncSide(t, false, nil)

	// An ORDERED command in the set: a SIMPLE one waits for it.
	ordered := &Command{Nexus: otherNexus, LUN: EncodeLUN(0), Tag: 1, Attr: TaskOrdered, CDB: cdb10(0x28, 0, 0, 1), DataIn: make([]byte, asyncBS)}
	clearPowerOnUA(t, s.m, otherNexus)
	require.Equal(t, Pending, s.m.Start(ordered, q, 1))
	c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 2, CDB: cdb10(0x28, 0, 9, 1), DataIn: make([]byte, asyncBS)}
	require.Equal(t, Blocked, s.m.Start(c, q, 2))
	done := make(chan struct{})
	go func() { s.m.Continue(c); close(done) }()
	select {
	case <-done:
		t.Fatal("the SIMPLE command ran before the older ORDERED one was over")
	case <-time.After(50 * time.Millisecond):
	}
	require.Equal(t, Done, s.m.Complete(ordered, reapOne(t, q, 1)))
	<-done
	require.Equal(t, StatusGood, c.Status)
	require.Equal(t, blocksOf(9, 1), c.DataIn)

	// A COMPARE AND WRITE holds its range: a WRITE into it waits.
	slot := s.lu.ranges.lock(100, 4, true)
	w := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 3, CDB: cdb10(0x2A, 0, 102, 1), DataOut: testutil.Pattern(asyncBS, 8)}
	require.Equal(t, Blocked, s.m.Start(w, q, 3))
	require.Zero(t, q.InFlight())
	done = make(chan struct{})
	go func() { s.m.Continue(w); close(done) }()
	select {
	case <-done:
		t.Fatal("the WRITE ran inside a range held exclusive")
	case <-time.After(50 * time.Millisecond):
	}
	s.lu.ranges.unlock(slot)
	<-done
	require.Equal(t, StatusGood, w.Status)
	got := make([]byte, asyncBS)
	require.NoError(t, s.file.ReadAt(got, 102*asyncBS))
	require.Equal(t, w.DataOut, got)
	// and a write outside it did not wait
	slot = s.lu.ranges.lock(100, 4, true)
	w2 := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 4, CDB: cdb10(0x2A, 0, 104, 1), DataOut: testutil.Pattern(asyncBS, 9)}
	require.Equal(t, Pending, s.m.Start(w2, q, 4))
	require.Equal(t, Done, s.m.Complete(w2, reapOne(t, q, 4)))
	s.lu.ranges.unlock(slot)

	// A full queue: the command is done by Continue instead.
	small, err := backstore.NewQueue(1, false)
	require.NoError(t, err)
	defer small.Close()
	r1 := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 5, CDB: cdb10(0x28, 0, 1, 1), DataIn: make([]byte, asyncBS)}
	r2 := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 6, CDB: cdb10(0x2F, 0x02, 2, 1), DataOut: blocksOf(2, 1)}
	require.Equal(t, Pending, s.m.Start(r1, small, 5))
	require.Equal(t, Blocked, s.m.Start(r2, small, 6))
	s.m.Continue(r2)
	require.Equal(t, StatusGood, r2.Status, "% x", r2.SenseData())
	require.Equal(t, Done, s.m.Complete(r1, reapOne(t, small, 5)))
	require.Equal(t, blocksOf(1, 1), r1.DataIn)
	require.Nil(t, s.lu.tasks.list.head)

	// A Blocked command its transport gives up leaves the task set: an ORDERED command
	// behind it runs.
	r3 := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 7, CDB: cdb10(0x2F, 0x02, 2, 1), DataOut: blocksOf(2, 1)}
	require.Equal(t, Pending, s.m.Start(r1, small, 5))
	require.Equal(t, Blocked, s.m.Start(r3, small, 7))
	require.NotNil(t, s.lu.tasks.list.head)
	require.Equal(t, Done, s.m.Complete(r1, reapOne(t, small, 5)))
	s.m.Abandon(r3)
	require.Equal(t, StatusTaskAborted, r3.Status)
	require.Nil(t, s.lu.tasks.list.head, "the abandoned command left the task set")
	s.m.Abandon(r3) // twice is harmless
	o := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 8, Attr: TaskOrdered, CDB: cdb10(0x28, 0, 3, 1), DataIn: make([]byte, asyncBS)}
	require.Equal(t, Pending, s.m.Start(o, small, 8))
	require.Equal(t, Done, s.m.Complete(o, reapOne(t, small, 8)))
	require.Equal(t, StatusGood, o.Status)
}

// TestAsyncTaskManagement: task management waits for a pending command as it waits for one a
// worker executes: ABORT TASK and LOGICAL UNIT RESET return only once its completion has been
// handed to Complete, and the command is then aborted (the transport sends no response).
func TestAsyncTaskManagement(t *testing.T) {
	for _, tmf := range []struct {
		name string
		do   func(m *LUNMap, c *Command) TMFResponse
	}{
		{"ABORT TASK", func(m *LUNMap, c *Command) TMFResponse { return m.AbortTask(testNexus, c.LUN, c.Tag) }},
		{"ABORT TASK SET", func(m *LUNMap, c *Command) TMFResponse { return m.AbortTaskSet(testNexus, c.LUN) }},
		{"LOGICAL UNIT RESET", func(m *LUNMap, c *Command) TMFResponse { return m.LogicalUnitReset(testNexus, c.LUN) }},
		{"I_T NEXUS RESET", func(m *LUNMap, c *Command) TMFResponse { m.NexusReset(testNexus); return TMFComplete }},
	} {
		t.Run(tmf.name, func(t *testing.T) {
			q := newTestQueue(t)
			s := newAsyncSide(t, false, nil)
			// a verification of three chunks: pending on its first
			c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 9, CDB: cdb10(0x2F, 0, 0, 600)}
			require.Equal(t, Pending, s.m.Start(c, q, 9))
			require.Equal(t, TMFSucceeded, s.m.QueryTask(testNexus, c.LUN, 9), "QUERY TASK finds it")
			answered := make(chan TMFResponse, 1)
			go func() { answered <- tmf.do(s.m, c) }()
			testutil.WaitFor(t, "the abort to mark the command", c.Aborted)
			select {
			case r := <-answered:
				t.Fatalf("answered %v while the command's read was in flight", r)
			case <-time.After(50 * time.Millisecond):
			}
			// the read's completion ends the walk: an aborted verification stops at the next chunk
			require.Equal(t, Done, s.m.Complete(c, reapOne(t, q, 9)))
			require.Equal(t, TMFComplete, <-answered)
			require.True(t, c.Aborted())
			require.Zero(t, q.InFlight())
			require.Nil(t, s.lu.tasks.list.head)
			// a command aborted before Start gets TASK ABORTED without reaching the queue
			if tmf.name == "ABORT TASK" {
				c2 := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Tag: 10, CDB: cdb10(0x28, 0, 0, 1), DataIn: make([]byte, asyncBS)}
				c2.aborted.Store(true)
				require.Equal(t, Done, s.m.Start(c2, q, 10))
				require.Equal(t, StatusTaskAborted, c2.Status)
				require.Zero(t, q.InFlight())
			}
		})
	}
}
