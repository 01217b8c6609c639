package scsi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// tmfAsync runs a task management function in a goroutine; the channel yields its response.
func tmfAsync(f func() TMFResponse) <-chan TMFResponse {
	ch := make(chan TMFResponse, 1)
	go func() { ch <- f() }()
	return ch
}

func requireTMF(t *testing.T, ch <-chan TMFResponse, want TMFResponse) {
	t.Helper()
	select {
	case got := <-ch:
		require.Equal(t, want, got)
	case <-time.After(10 * time.Second):
		t.Fatal("task management function did not return")
	}
}

// requireTMFBlocked checks that the function has not returned. Callers establish first that it
// waits for a running command (aborters > 0) held at a closed gate.
func requireTMFBlocked(t *testing.T, ch <-chan TMFResponse) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("task management function returned %v while an aborted command still runs", r)
	default:
	}
}

// waitTMFWaiting waits until the function r, named fn, waits for a running command, and
// checks that it has not returned.
func waitTMFWaiting(t *testing.T, lu *LogicalUnit, r <-chan TMFResponse, fn string) {
	t.Helper()
	testutil.WaitFor(t, fn+" to wait for the running command", func() bool { return lu.aborters() == 1 })
	requireTMFBlocked(t, r)
}

// openAborted lets the running command a finish (open), then checks that the function r
// completes and that a ended aborted.
func openAborted(t *testing.T, r <-chan TMFResponse, a *pending, open func()) {
	t.Helper()
	open()
	requireTMF(t, r, TMFComplete)
	a.wait(t)
	require.True(t, a.c.Aborted())
}

// aborters reports how many task management functions wait for running commands.
func (lu *LogicalUnit) aborters() int {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.tasks.aborters
}

// requireAborted checks what Execute leaves in a command aborted while it waited in the task set.
func requireAborted(t *testing.T, c *Command) {
	t.Helper()
	require.True(t, c.Aborted())
	require.Equal(t, StatusTaskAborted, c.Status)
	require.Zero(t, c.SenseLength)
	require.Zero(t, c.DataInLength)
}

// runningAndWaiting starts from nexus n a SIMPLE WRITE of block 1 (tag 1) that it holds at the
// gate of g, running, and an ORDERED WRITE of block 2 (tag 2) that waits behind it; open lets
// the first one finish.
func runningAndWaiting(t *testing.T, lu *LogicalUnit, m *LUNMap, g *gatestore.Store, n *Nexus) (running, waiting *pending, open func()) {
	t.Helper()
	open = g.Gate(1 * 512)
	running = start(m, n, 1, TaskSimple, cdb10(0x2A, 0, 1, 1), fill(512, 1), 0)
	g.RequireEntered(t, 512)
	waiting = start(m, n, 2, TaskOrdered, cdb10(0x2A, 0, 2, 1), fill(512, 2), 0)
	waitTasks(t, lu, 2, 1)
	return running, waiting, open
}

// waitingBehind starts from nexus n, after runningAndWaiting, a SIMPLE WRITE of block 3 (tag
// 3): it waits in the task set behind the ORDERED command.
func waitingBehind(t *testing.T, lu *LogicalUnit, m *LUNMap, n *Nexus) *pending {
	t.Helper()
	c := start(m, n, 3, TaskSimple, cdb10(0x2A, 0, 3, 1), fill(512, 3), 0)
	waitTasks(t, lu, 3, 2)
	return c
}

// turFrom sends TEST UNIT READY from n and returns the command.
func turFrom(m *LUNMap, n *Nexus) *Command { return run(m, n, 0, make([]byte, 6), nil, 0) }

// TestAbortTaskWaiting checks ABORT TASK of a command that waits in the task set: it leaves at
// once with TASK ABORTED, never touches the medium, and the function does not wait for anything.
func TestAbortTaskWaiting(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	a, b, open := runningAndWaiting(t, lu, m, g, testNexus)

	require.Equal(t, TMFComplete, m.AbortTask(testNexus, EncodeLUN(0), 2))
	requireAborted(t, b.wait(t))
	waitTasks(t, lu, 1, 0)
	require.False(t, a.c.Aborted())

	open()
	checkGood(t, a.wait(t))
	require.Equal(t, []string{"write 512"}, g.TakeOrder(), "the aborted write never reached the store")
	// ABORT TASK of a tag that is not there (any more) is FUNCTION COMPLETE too.
	require.Equal(t, TMFComplete, m.AbortTask(testNexus, EncodeLUN(0), 2))
	require.Equal(t, TMFIncorrectLUN, m.AbortTask(testNexus, EncodeLUN(5), 2))
}

// TestAbortTaskRunning checks ABORT TASK of a running command: the function returns only after
// the command finished, and the command is marked aborted so that the transport sends nothing.
// The same tag from another nexus is a different command and is not touched.
func TestAbortTaskRunning(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	open := g.Gate(3 * 512)
	a := start(m, testNexus, 7, TaskSimple, cdb10(0x28, 0, 3, 1), nil, 512)
	g.RequireEntered(t, 3*512)
	other := start(m, otherNexus, 7, TaskSimple, cdb10(0x28, 0, 4, 1), nil, 512)
	checkGood(t, other.wait(t))

	r := tmfAsync(func() TMFResponse { return lu.AbortTask(testNexus, 7) })
	waitTMFWaiting(t, lu, r, "ABORT TASK")
	a.requireRunning(t)
	require.True(t, a.c.Aborted())

	openAborted(t, r, a, open)
	require.False(t, other.c.Aborted())
	waitTasks(t, lu, 0, 0)
}

// TestAbortTaskSet checks ABORT TASK SET: every command of the nexus goes, waiting or running,
// the function waits for the running one, and the other nexus's command is untouched and gets no
// unit attention.
func TestAbortTaskSet(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	a, b, open := runningAndWaiting(t, lu, m, g, testNexus)
	c := waitingBehind(t, lu, m, otherNexus)

	r := tmfAsync(func() TMFResponse { return m.AbortTaskSet(testNexus, EncodeLUN(0)) })
	requireAborted(t, b.wait(t))
	waitTMFWaiting(t, lu, r, "ABORT TASK SET")
	// With the ORDERED command gone, the other nexus's command runs.
	checkGood(t, c.wait(t))
	require.False(t, c.c.Aborted())

	openAborted(t, r, a, open)
	checkGood(t, turFrom(m, otherNexus))
	checkGood(t, turFrom(m, testNexus))
	require.Equal(t, make([]byte, 512), readMedium(t, g, 2*512, 512))
}

// TestClearTaskSet checks CLEAR TASK SET: the commands of every nexus go, and the other nexuses
// that lost commands get COMMANDS CLEARED BY ANOTHER INITIATOR (TAS is 0); the nexus that sent
// the function does not.
func TestClearTaskSet(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	a, b, open := runningAndWaiting(t, lu, m, g, otherNexus)
	c := waitingBehind(t, lu, m, testNexus)

	r := tmfAsync(func() TMFResponse { return m.ClearTaskSet(testNexus, EncodeLUN(0)) })
	requireAborted(t, b.wait(t))
	requireAborted(t, c.wait(t))
	waitTMFWaiting(t, lu, r, "CLEAR TASK SET")
	openAborted(t, r, a, open)
	require.Equal(t, []string{"write 512"}, g.TakeOrder(), "the aborted waiting commands never started")

	checkGood(t, turFrom(m, testNexus))
	checkSense(t, turFrom(m, otherNexus), senseWant{0x6, 0x2F, 0x00, -1, -1, false, 0, false})
	checkGood(t, turFrom(m, otherNexus))
}

// TestLogicalUnitReset checks LOGICAL UNIT RESET: every command goes, the function waits for the
// running ones, the mode parameters return to their defaults, and every nexus, the sender
// included, gets BUS DEVICE RESET FUNCTION OCCURRED once.
func TestLogicalUnitReset(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	require.True(t, lu.writeCacheEnabled())
	lu.mode.wce.Store(false)
	lu.mode.dSense.Store(true)

	open := g.Gate(1 * 512)
	a := start(m, otherNexus, 1, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	g.RequireEntered(t, 512)
	b := start(m, testNexus, 2, TaskOrdered, cdb10(0x28, 0, 2, 1), nil, 512)
	waitTasks(t, lu, 2, 1)

	r := tmfAsync(func() TMFResponse { return m.LogicalUnitReset(testNexus, EncodeLUN(0)) })
	requireAborted(t, b.wait(t))
	waitTMFWaiting(t, lu, r, "the reset")
	openAborted(t, r, a, open)

	require.True(t, lu.writeCacheEnabled(), "WCE back to its default")
	require.False(t, lu.descriptorSense(), "D_SENSE back to its default")
	for _, n := range []*Nexus{testNexus, otherNexus} {
		checkSense(t, turFrom(m, n), senseWant{0x6, 0x29, 0x03, -1, -1, false, 0, false})
		checkGood(t, turFrom(m, n))
	}
	require.Equal(t, TMFIncorrectLUN, m.LogicalUnitReset(testNexus, EncodeLUN(3)))
}

// TestNexusReset checks I_T NEXUS RESET (or loss): the nexus's commands go, the function waits
// for the running one, that nexus alone gets I_T NEXUS LOSS OCCURRED, and a nexus the logical
// unit never saw gets the usual power-on unit attention instead.
func TestNexusReset(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	open := g.Gate(1 * 512)
	a := start(m, testNexus, 1, TaskSimple, cdb10(0x2A, 0, 1, 1), fill(512, 1), 0)
	g.RequireEntered(t, 512)
	b := start(m, otherNexus, 2, TaskSimple, cdb10(0x28, 0, 5, 1), nil, 512)
	checkGood(t, b.wait(t))

	done := make(chan struct{})
	go func() { m.NexusReset(testNexus); close(done) }()
	testutil.WaitFor(t, "the nexus reset to wait for the running command", func() bool { return lu.aborters() == 1 })
	select {
	case <-done:
		t.Fatal("NexusReset returned while the command runs")
	default:
	}
	open()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("NexusReset did not return")
	}
	a.wait(t)
	require.True(t, a.c.Aborted())

	checkSense(t, turFrom(m, testNexus), senseWant{0x6, 0x29, 0x07, -1, -1, false, 0, false})
	checkGood(t, turFrom(m, testNexus))
	checkGood(t, turFrom(m, otherNexus))

	stranger := &Nexus{InitiatorPort: "stranger", Port: testPort}
	m.NexusReset(stranger)
	checkSense(t, turFrom(m, stranger), senseWant{0x6, 0x29, 0x00, -1, -1, false, 0, false})
	checkGood(t, turFrom(m, stranger))
}

// TestQueryTask checks QUERY TASK: FUNCTION SUCCEEDED while the command is in the task set
// (running or waiting), FUNCTION COMPLETE when it is not, per nexus.
func TestQueryTask(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	open := g.Gate(1 * 512)
	a := start(m, testNexus, 10, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	g.RequireEntered(t, 512)
	b := start(m, testNexus, 11, TaskOrdered, cdb10(0x28, 0, 2, 1), nil, 512)
	waitTasks(t, lu, 2, 1)

	require.Equal(t, TMFSucceeded, m.QueryTask(testNexus, EncodeLUN(0), 10))
	require.Equal(t, TMFSucceeded, m.QueryTask(testNexus, EncodeLUN(0), 11))
	require.Equal(t, TMFComplete, m.QueryTask(testNexus, EncodeLUN(0), 12))
	require.Equal(t, TMFComplete, m.QueryTask(otherNexus, EncodeLUN(0), 10))
	require.Equal(t, TMFIncorrectLUN, m.QueryTask(testNexus, EncodeLUN(1), 10))

	open()
	checkGood(t, a.wait(t))
	checkGood(t, b.wait(t))
	require.Equal(t, TMFComplete, m.QueryTask(testNexus, EncodeLUN(0), 10))
	require.Equal(t, TMFComplete, m.QueryTask(testNexus, EncodeLUN(0), 11))
}
