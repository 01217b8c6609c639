package scsi

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// pending is a command running in its own goroutine.
type pending struct {
	c    *Command
	done chan struct{}
}

// start sends a command with a tag and an attribute from nexus n to LUN 0 in a goroutine.
func start(m *LUNMap, n *Nexus, tag uint64, attr TaskAttribute, cdb, out []byte, inLen int) *pending {
	p := &pending{
		c: &Command{Nexus: n, LUN: EncodeLUN(0), Tag: tag, Attr: attr, CDB: cdb, DataOut: out,
			DataIn: make([]byte, inLen)},
		done: make(chan struct{}),
	}
	go func() {
		m.Execute(p.c)
		close(p.done)
	}()
	return p
}

// wait waits for the command to return from Execute.
func (p *pending) wait(t *testing.T) *Command {
	t.Helper()
	select {
	case <-p.done:
		return p.c
	case <-time.After(10 * time.Second):
		t.Fatalf("command %d did not complete", p.c.Tag)
		return nil
	}
}

// requireRunning checks that the command has not returned from Execute. The tests call it only
// when the command cannot have returned (it waits in the task set or at a closed gate, which the
// test has established first), so a pass is never luck.
func (p *pending) requireRunning(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("command %d completed (status %v) while it should be held", p.c.Tag, p.c.Status)
	default:
	}
}

// taskCounts returns how many commands are in the task set and how many of them wait.
func (lu *LogicalUnit) taskCounts() (queued, waiting int) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for t := lu.tasks.list.head; t != nil; t = t.next {
		queued++
	}
	return queued, lu.tasks.waiting
}

func waitTasks(t *testing.T, lu *LogicalUnit, queued, waiting int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d commands queued, %d waiting", queued, waiting), func() bool {
		q, w := lu.taskCounts()
		return q == queued && w == waiting
	})
}

// requireOrderedWriteThenRead ends the sequence of the ORDERED tests: A (a SIMPLE WRITE of LBA 1,
// 512 bytes of 0xA), B (an ORDERED WRITE of LBA 2, 0xB) and C (a SIMPLE READ of LBA 2 behind B).
// Once B is free to run, B and C end GOOD, C reading what B wrote, the gate saw the three in
// that order and the task set is empty.
func requireOrderedWriteThenRead(t *testing.T, lu *LogicalUnit, g *gatestore.Store, b, c *pending) {
	t.Helper()
	checkGood(t, b.wait(t))
	cc := c.wait(t)
	checkGood(t, cc)
	require.Equal(t, fill(512, 0xB), cc.DataIn, "C read what the ORDERED write before it wrote")
	require.Equal(t, []string{"write 512", "write 1024", "read 1024"}, g.TakeOrder())
	waitTasks(t, lu, 0, 0)
}

// TestTaskSetOrdered checks SAM-5's task attributes: an ORDERED command waits until the older
// SIMPLE command completed, a SIMPLE command newer than the ORDERED one waits until that one
// completed, and a HEAD OF QUEUE command runs at once past all of them.
func TestTaskSetOrdered(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	openA := g.Gate(1 * 512)
	openB := g.Gate(2 * 512)

	a := start(m, testNexus, 1, TaskSimple, cdb10(0x2A, 0, 1, 1), fill(512, 0xA), 0)
	g.RequireEntered(t, 1*512)
	b := start(m, otherNexus, 2, TaskOrdered, cdb10(0x2A, 0, 2, 1), fill(512, 0xB), 0)
	waitTasks(t, lu, 2, 1)
	c := start(m, testNexus, 3, TaskSimple, cdb10(0x28, 0, 2, 1), nil, 512)
	waitTasks(t, lu, 3, 2)

	hoq := &Command{Nexus: otherNexus, LUN: EncodeLUN(0), Tag: 4, Attr: TaskHeadOfQueue, CDB: cdb10(0x28, 0, 5, 1), DataIn: make([]byte, 512)}
	m.Execute(hoq)
	checkGood(t, hoq)
	b.requireRunning(t)
	c.requireRunning(t)
	require.Equal(t, []string{"read 2560"}, g.TakeOrder())

	openA()
	checkGood(t, a.wait(t))
	g.RequireEntered(t, 2*512) // B runs now...
	waitTasks(t, lu, 2, 1)     // ...and C still waits for it
	c.requireRunning(t)
	openB()
	requireOrderedWriteThenRead(t, lu, g, b, c)
}

// TestTaskSetOrderedAlone checks that an ORDERED or HEAD OF QUEUE command with nothing older runs
// at once, and that the ACA attribute, which this device server does not support, is refused.
func TestTaskSetOrderedAlone(t *testing.T) {
	_, m, _ := newMemLU(t, 16, 512, nil)
	for _, attr := range []TaskAttribute{TaskOrdered, TaskHeadOfQueue, TaskSimple} {
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Attr: attr, CDB: cdb10(0x28, 0, 0, 1), DataIn: make([]byte, 512)}
		m.Execute(c)
		checkGood(t, c)
	}
	c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), Attr: TaskACA, CDB: cdb10(0x28, 0, 0, 1), DataIn: make([]byte, 512)}
	m.Execute(c)
	checkSense(t, c, invalidIU)
}

// TestTaskSetOrderedChain checks two ORDERED commands in a row: the second waits for the first,
// and a SIMPLE command behind both waits for the second.
func TestTaskSetOrderedChain(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	open1 := g.Gate(1 * 512)
	o1 := start(m, testNexus, 1, TaskOrdered, cdb10(0x2A, 0, 1, 1), fill(512, 1), 0)
	g.RequireEntered(t, 512)
	o2 := start(m, testNexus, 2, TaskOrdered, cdb10(0x2A, 0, 1, 1), fill(512, 2), 0)
	waitTasks(t, lu, 2, 1)
	s := start(m, otherNexus, 3, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
	waitTasks(t, lu, 3, 2)
	o2.requireRunning(t)
	s.requireRunning(t)
	open1() // o2 writes the same block: its gate is open now too
	checkGood(t, o1.wait(t))
	checkGood(t, o2.wait(t))
	sc := s.wait(t)
	checkGood(t, sc)
	require.Equal(t, fill(512, 2), sc.DataIn)
	require.Equal(t, []string{"write 512", "write 512", "read 512"}, g.TakeOrder())
}

// TestTaskSetConcurrent runs many commands at once from several nexuses with mixed task
// attributes, each goroutine on its own blocks, reusing its Command as a transport does, and
// checks every byte read back. Run with -race.
func TestTaskSetConcurrent(t *testing.T) {
	const (
		goroutines = 12
		rounds     = 150
		region     = 8 // blocks per goroutine
	)
	forBlockSizes(t, func(t *testing.T, bs int) {
		_, m, mem := newMemLU(t, goroutines*region, uint32(bs), func(c *Config) { c.ThinProvisioning = true })
		nexuses := []*Nexus{testNexus, otherNexus, {InitiatorPort: "third", Port: testPort}}
		run(m, nexuses[2], 0, make([]byte, 6), nil, 0) // its power-on unit attention
		attrs := []TaskAttribute{TaskSimple, TaskSimple, TaskSimple, TaskSimple, TaskSimple, TaskSimple, TaskOrdered, TaskHeadOfQueue}
		last := make([][]byte, goroutines)
		var eg errgroup.Group
		for g := 0; g < goroutines; g++ {
			eg.Go(func() error {
				r := rand.New(rand.NewPCG(uint64(g), 2))
				nx := nexuses[g%len(nexuses)]
				base := uint64(g * region)
				c := &Command{DataIn: make([]byte, region*bs)}
				exec := func(tag uint64, cdb, out []byte) error {
					in := c.DataIn[:region*bs]
					c.Reset()
					c.Nexus, c.LUN, c.Tag, c.Attr = nx, EncodeLUN(0), tag, attrs[r.IntN(len(attrs))]
					c.CDB, c.DataOut, c.DataIn = cdb, out, in
					m.Execute(c)
					if c.Status != StatusGood {
						return fmt.Errorf("goroutine %d, % x: status %v sense % x", g, cdb, c.Status, c.SenseData())
					}
					return nil
				}
				for i := 0; i < rounds; i++ {
					n := 1 + r.IntN(region)
					data := testutil.Pattern(n*bs, g*31+i)
					tag := uint64(g)<<32 | uint64(i)
					var err error
					switch r.IntN(6) {
					case 0: // WRITE SAME of one block, through the scratch buffers
						blk := data[:bs]
						err = exec(tag, cdb16(0x93, 0, base, uint32(n)), blk)
						data = make([]byte, 0, n*bs)
						for j := 0; j < n; j++ {
							data = append(data, blk...)
						}
					case 1: // COMPARE AND WRITE of what is there
						if err = exec(tag, cdb10(0x28, 0, uint32(base), uint16(n)), nil); err != nil {
							break
						}
						cur := append([]byte(nil), c.DataIn[:n*bs]...)
						err = exec(tag, cawCDB(0, base, byte(n)), append(cur, data...))
					default:
						err = exec(tag, cdb16(0x8A, 0x08, base, uint32(n)), data)
					}
					if err == nil {
						err = exec(tag, cdb10(0x28, 0, uint32(base), uint16(n)), nil)
					}
					if err == nil && string(c.DataIn[:n*bs]) != string(data) {
						err = fmt.Errorf("goroutine %d round %d: read back other data", g, i)
					}
					if err != nil {
						return err
					}
					if n == region {
						last[g] = data
					} else if last[g] != nil {
						copy(last[g], data)
					}
				}
				return nil
			})
		}
		require.NoError(t, eg.Wait())
		for g := 0; g < goroutines; g++ {
			if last[g] != nil {
				require.Equal(t, last[g], readMedium(t, mem, int64(g*region*bs), region*bs), "region %d", g)
			}
		}
	})
}
