package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// nonBlockingGate is a gate store that claims never to block, so that its logical unit runs
// SIMPLE READs and WRITEs untracked (taskSet.enterUntracked) and a test can hold one there.
type nonBlockingGate struct{ *gatestore.Store }

func (nonBlockingGate) NonBlocking() bool { return true }

var _ backstore.NonBlocking = nonBlockingGate{}

func newUntrackedGateLU(t *testing.T) (*LogicalUnit, *LUNMap, *gatestore.Store) {
	t.Helper()
	mem, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	g := gatestore.New(mem)
	lu, m := newLUOver(t, nonBlockingGate{g}, nil)
	require.True(t, lu.NonBlocking())
	return lu, m, g
}

// untrackedCounts returns the commands running untracked and what closes that path.
func (lu *LogicalUnit) untrackedCounts() (untracked, closed uint32) {
	v := lu.tasks.untracked.word.Load()
	return uint32(v), uint32(v >> 32)
}

// waitUntrackedClosed waits until the task management function fn, sent before, has closed the
// untracked path.
func waitUntrackedClosed(t *testing.T, lu *LogicalUnit, fn string) {
	t.Helper()
	testutil.WaitFor(t, fn+" closes the untracked path", func() bool {
		_, closed := lu.untrackedCounts()
		return closed == 1
	})
}

// TestTaskSetUntrackedOrdered: a SIMPLE WRITE of a logical unit that never blocks runs outside
// the task set's list, and still an ORDERED command waits for it, and a SIMPLE command newer
// than the ORDERED one waits for that (SAM-5 8.6).
func TestTaskSetUntrackedOrdered(t *testing.T) {
	lu, m, g := newUntrackedGateLU(t)
	openA := g.Gate(1 * 512)
	a := start(m, testNexus, 1, TaskSimple, cdb10(0x2A, 0, 1, 1), fill(512, 0xA), 0)
	g.RequireEntered(t, 1*512)
	waitTasks(t, lu, 0, 0) // not in the list
	u, closed := lu.untrackedCounts()
	require.Equal(t, uint32(1), u)
	require.Zero(t, closed)

	b := start(m, otherNexus, 2, TaskOrdered, cdb10(0x2A, 0, 2, 1), fill(512, 0xB), 0)
	waitTasks(t, lu, 1, 1)
	c := start(m, testNexus, 3, TaskSimple, cdb10(0x28, 0, 2, 1), nil, 512)
	waitTasks(t, lu, 2, 2) // behind the ORDERED one, in the list
	b.requireRunning(t)
	c.requireRunning(t)

	openA()
	checkGood(t, a.wait(t))
	requireOrderedWriteThenRead(t, lu, g, b, c)
	u, closed = lu.untrackedCounts()
	require.Zero(t, u)
	require.Zero(t, closed)

	// With nothing ORDERED left the path is open again.
	openA = g.Gate(1 * 512)
	a = start(m, testNexus, 4, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	g.RequireEntered(t, 1*512)
	waitTasks(t, lu, 0, 0)
	openA()
	checkGood(t, a.wait(t))
}

// TestTaskSetUntrackedTMF: task management waits for the untracked commands to end before it
// looks at the task set, so that when it returns none of the commands it covers still runs;
// it then finds them ended (QUERY TASK: FUNCTION COMPLETE), and commands that arrive while it
// waits go into the list, where it sees them.
func TestTaskSetUntrackedTMF(t *testing.T) {
	lu, m, g := newUntrackedGateLU(t)
	openA := g.Gate(1 * 512)
	a := start(m, testNexus, 10, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	g.RequireEntered(t, 1*512)

	query := tmfAsync(func() TMFResponse { return m.QueryTask(testNexus, EncodeLUN(0), 10) })
	waitUntrackedClosed(t, lu, "QUERY TASK")
	// A command arriving now enters the list, and it runs: only ORDERED commands wait.
	b := start(m, otherNexus, 11, TaskSimple, cdb10(0x28, 0, 3, 1), nil, 512)
	checkGood(t, b.wait(t))
	select {
	case r := <-query:
		t.Fatalf("QUERY TASK answered %v while the command ran untracked", r)
	default:
	}
	openA()
	checkGood(t, a.wait(t))
	require.Equal(t, TMFComplete, <-query)

	// ABORT TASK likewise returns only once the command has ended; it was not aborted, as it
	// had completed by the time the task set was looked at.
	openA = g.Gate(1 * 512)
	a = start(m, testNexus, 12, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	g.RequireEntered(t, 1*512)
	abort := tmfAsync(func() TMFResponse { return m.AbortTask(testNexus, EncodeLUN(0), 12) })
	waitUntrackedClosed(t, lu, "ABORT TASK")
	openA()
	require.Equal(t, TMFComplete, <-abort)
	checkGood(t, a.wait(t))
	require.False(t, a.c.Aborted())
	u, closed := lu.untrackedCounts()
	require.Zero(t, u)
	require.Zero(t, closed)
}
