package scsi

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/gatestore"
)

// memPRCluster is a PRStore in memory shared by several device servers (memPRGateway): what
// the RADOS store does, with Publish applying the new version to every other gateway at once.
type memPRCluster struct {
	mu      sync.Mutex
	data    []byte
	version uint64
	gws     []*memPRGateway
}

// memPRGateway is one device server's handle on the cluster.
type memPRGateway struct {
	cl *memPRCluster
	r  *Reservations
	// deaf gateways are not told of changes (a cut watch).
	deaf bool
}

func (g *memPRGateway) Load() ([]byte, uint64, error) {
	g.cl.mu.Lock()
	defer g.cl.mu.Unlock()
	return g.cl.data, g.cl.version, nil
}

func (g *memPRGateway) Commit(old uint64, data []byte) (bool, error) {
	g.cl.mu.Lock()
	defer g.cl.mu.Unlock()
	if old != g.cl.version {
		return false, nil
	}
	g.cl.data, g.cl.version = data, old+1
	return true, nil
}

func (g *memPRGateway) Publish(v uint64) error {
	g.cl.mu.Lock()
	others := make([]*memPRGateway, 0, len(g.cl.gws))
	for _, o := range g.cl.gws {
		if o != g && !o.deaf {
			others = append(others, o)
		}
	}
	g.cl.mu.Unlock()
	for _, o := range others {
		data, cv, _ := o.Load()
		if err := o.r.Apply(data, cv); err != nil {
			return err
		}
	}
	return nil
}

// newGateway makes a device server's reservations on the cluster, fresh.
func (cl *memPRCluster) newGateway(t testing.TB) *memPRGateway {
	g := &memPRGateway{cl: cl}
	r, err := NewSharedReservations(g)
	require.NoError(t, err)
	r.SetFresh(true)
	g.r = r
	cl.mu.Lock()
	cl.gws = append(cl.gws, g)
	cl.mu.Unlock()
	return g
}

// newMap is a map with a logical unit of blocks of 512 bytes in memory at LUN 0 whose device
// server keeps its reservations through g.
func (g *memPRGateway) newMap(t testing.TB, blocks int64) *LUNMap {
	return newTestMap(t, newTestLU(t, blocks, 512, func(cfg *Config) { cfg.Reservations = g.r }))
}

// abGateways is two gateways in front of one logical unit of 1000 blocks in memory, with A's
// map (prNexusA, through the first) and B's (prNexusB2, through the second), their power-on
// unit attentions reported.
func abGateways(t *testing.T) (g1, g2 *memPRGateway, m1, m2 *LUNMap) {
	cl := &memPRCluster{}
	g1, g2 = cl.newGateway(t), cl.newGateway(t)
	m1, m2 = g1.newMap(t, 1000), g2.newMap(t, 1000)
	clearPowerOnUA(t, m1, prNexusA)
	clearPowerOnUA(t, m2, prNexusB2)
	return g1, g2, m1, m2
}

// gatedABGateways is abGateways over 64 blocks with the second gateway's backstore behind a
// gate, and A and B registered (keyA, keyB).
func gatedABGateways(t *testing.T) (g2 *memPRGateway, m1, m2 *LUNMap, lu2 *LogicalUnit, gs *gatestore.Store) {
	cl := &memPRCluster{}
	g1, g2 := cl.newGateway(t), cl.newGateway(t)
	m1 = g1.newMap(t, 64)
	gs = gatestore.New(newMem64(t))
	lu2, m2 = newLUOver(t, gs, func(cfg *Config) { cfg.Reservations = g2.r })
	clearPowerOnUA(t, m1, prNexusA)
	clearPowerOnUA(t, m2, prNexusB2)
	requireGood(t, sendPROut(m1, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m2, prNexusB2, prOutRegister, 0, prParams(0, keyB, 0)))
	return g2, m1, m2, lu2, gs
}

// Two device servers' target ports, each describing both in its ALUA groups as gateways do, and
// A, B and C through each.
// prCommitLog records each version stored through loggingStores: its state and the operation
// of the gateway that stored it, for model checks; and how many commits lost a race.
type prCommitLog struct {
	mu        sync.Mutex
	commits   []prCommit
	conflicts int
}

type prCommit struct {
	version uint64
	data    []byte
	op      any
	// ambiguous: the store answered with an error (a RADOS timeout), and the write may
	// have gone in or not.
	ambiguous bool
}

// versions returns the stored versions in order: for each version the commit that stored it,
// or the one whose answer was an error (ambiguous) when no commit is known to have stored it:
// later versions show it went in.
func (l *prCommitLog) versions() []prCommit {
	byVersion := map[uint64]prCommit{}
	var last uint64
	for _, c := range l.commits {
		if prev, ok := byVersion[c.version]; !ok || prev.ambiguous && !c.ambiguous {
			byVersion[c.version] = c
		}
		last = max(last, c.version)
	}
	var out []prCommit
	for v := uint64(1); v <= last; v++ {
		if c, ok := byVersion[v]; ok {
			out = append(out, c)
		}
	}
	return out
}

// loggingStore is a PRStore that logs what goes through it; op is what its gateway's test
// goroutine is doing.
type loggingStore struct {
	PRStore
	log *prCommitLog
	op  any
	r   *Reservations // the reservations kept in it
}

func (l *loggingStore) Commit(old uint64, data []byte) (bool, error) {
	ok, err := l.PRStore.Commit(old, data)
	l.log.mu.Lock()
	defer l.log.mu.Unlock()
	switch {
	case ok:
		l.log.commits = append(l.log.commits, prCommit{old + 1, data, l.op, false})
	case err != nil:
		l.log.commits = append(l.log.commits, prCommit{old + 1, data, l.op, true})
	default:
		l.log.conflicts++
	}
	return ok, err
}

var (
	gwALUA    = func() *ALUA { a, _ := NewALUA([]PortGroup{{ID: 1, Ports: []uint16{1, 2}}}); return a }()
	port1     = &TargetPort{Name: "0x0002c90300a0b0c10002c90300a0b0c1", RelativeID: 1, ALUA: gwALUA}
	port2     = &TargetPort{Name: "0x0002c90300a0b0c20002c90300a0b0c2", RelativeID: 2, ALUA: gwALUA}
	prNexusA1 = &Nexus{InitiatorPort: "A via 1", InitiatorID: prNexusA.InitiatorID, Port: port1}
	prNexusB1 = &Nexus{InitiatorPort: "B via 1", InitiatorID: prNexusB.InitiatorID, Port: port1}
	prNexusC1 = &Nexus{InitiatorPort: "C via 1", InitiatorID: prNexusC.InitiatorID, Port: port1}
	prNexusA2 = &Nexus{InitiatorPort: "A via 2", InitiatorID: prNexusA.InitiatorID, Port: port2}
	prNexusB2 = &Nexus{InitiatorPort: "B via 2", InitiatorID: prNexusB.InitiatorID, Port: port2}
	prNexusC2 = &Nexus{InitiatorPort: "C via 2", InitiatorID: prNexusC.InitiatorID, Port: port2}
)

// twoPRGateways makes a topology of two device servers sharing the reservations of one
// logical unit (each with its own backstore: the reservations are what is tested): the first
// serves port 1, the second port 2; on names which of A, B and C go through the second.
func twoPRGateways(on string) prTopology {
	return func(t *testing.T, typ byte) (a, b, c *Nexus, m func(*Nexus) *LUNMap) {
		cl := &memPRCluster{}
		var lms [2]*LUNMap
		for i := range lms {
			lms[i] = cl.newGateway(t).newMap(t, 1000)
		}
		return spreadPRNexuses(t, lms, on, typ)
	}
}

// spreadPRNexuses puts A, B and C on the device servers of lms (those on names through the
// second), registers A and B and has A reserve typ unless it is 0.
func spreadPRNexuses(t *testing.T, lms [2]*LUNMap, on string, typ byte) (a, b, c *Nexus, m func(*Nexus) *LUNMap) {
	maps := make(map[*Nexus]*LUNMap)
	nx := []*Nexus{prNexusA1, prNexusB1, prNexusC1}
	for i, on2 := range []*Nexus{prNexusA2, prNexusB2, prNexusC2} {
		if containsByte(on, "ABC"[i]) {
			nx[i] = on2
		}
	}
	for _, n := range nx {
		maps[n] = lms[0]
		if n.Port == port2 {
			maps[n] = lms[1]
		}
		clearPowerOnUA(t, maps[n], n)
	}
	a, b, c = nx[0], nx[1], nx[2]
	requireGood(t, sendPROut(maps[a], a, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(maps[b], b, prOutRegister, 0, prParams(0, keyB, 0)))
	if typ != 0 {
		requireGood(t, sendPROut(maps[a], a, prOutReserve, typ, prParams(keyA, 0, 0)))
	}
	return a, b, c, func(n *Nexus) *LUNMap {
		if n.Port == port2 {
			return lms[1]
		}
		return lms[0]
	}
}

func containsByte(s string, b byte) bool {
	for i := range len(s) {
		if s[i] == b {
			return true
		}
	}
	return false
}

// TestPROutStateMachineTwoGateways runs the state machine's table with the three I_T nexuses
// spread over two device servers that share the reservations, every way: the answers, the
// reservation and keys read through another nexus's device server, and the unit attentions
// must be those of one device server.
func TestPROutStateMachineTwoGateways(t *testing.T) {
	for _, on := range []string{"A", "B", "C", "BC", "AC"} {
		t.Run("through the second: "+on, func(t *testing.T) { testPROutStateMachine(t, twoPRGateways(on)) })
	}
}

// TestPRTwoGatewaysFullStatus: registrations made through either device server are listed
// through both, each with the relative port it was made through.
func TestPRTwoGatewaysFullStatus(t *testing.T) {
	a, b, _, m := twoPRGateways("B")(t, PRTypeWriteExclusive)
	for _, n := range []*Nexus{a, b} {
		c := run(m(n), n, 0, prInCDB(3, 1024), nil, 1024)
		requireGood(t, c)
		d := data(c)
		require.Equal(t, uint32(96), binary.BigEndian.Uint32(d[4:]))
		require.Equal(t, uint16(1), binary.BigEndian.Uint16(d[8+18:]), "A's registration via port 1")
		require.Equal(t, byte(0x01), d[8+12], "A holds it")
		require.Equal(t, uint16(2), binary.BigEndian.Uint16(d[8+48+18:]), "B's via port 2")
		require.Equal(t, prNexusB.InitiatorID[:], d[8+48+32:8+48+48])
	}
}

// TestPRTwoGatewaysStale: a device server that cannot be sure its reservations are current
// fails what a reservation could conflict with (NOT READY, TARGET PORT IN UNAVAILABLE STATE),
// answers INQUIRY and REPORT LUNS, and serves again once it is.
func TestPRTwoGatewaysStale(t *testing.T) {
	_, g2, m1, m2 := abGateways(t)
	checkGood(t, run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))

	g2.r.SetFresh(false)
	for _, cdb := range [][]byte{cdb10(0x2A, 0, 1, 1), cdb10(0x28, 0, 1, 1), make([]byte, 6), prInCDB(0, 64), prOutCDB(prOutRegister, 0, 24)} {
		c := run(m2, prNexusB2, 0, cdb, make([]byte, 512), 512)
		requireSense(t, c, ReasonLUNotAccessibleTargetPortUnavailable)
	}
	checkGood(t, run(m2, prNexusB2, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36)) // INQUIRY
	// The other device server goes on, and its change is there once the first is fresh again.
	requireGood(t, sendPROut(m1, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m1, prNexusA, prOutReserve, PRTypeWriteExclusive, prParams(keyA, 0, 0)))
	g2.r.SetFresh(true)
	requireConflict(t, run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	checkGood(t, run(m2, prNexusB2, 0, cdb10(0x28, 0, 1, 1), nil, 512))
}

// TestPRTwoGatewaysMissedChanges: a device server cut off from the changes (deaf) catches up
// from the stored state when it is told of the next one; when more changes than the state
// keeps went by, its I_T nexuses still get the unit attentions the difference implies.
func TestPRTwoGatewaysMissedChanges(t *testing.T) {
	for _, missed := range []int{3, prMaxEvents + 5} {
		t.Run(fmt.Sprint(missed), func(t *testing.T) {
			g1, g2, m1, m2 := abGateways(t)
			requireGood(t, sendPROut(m2, prNexusB2, prOutRegister, 0, prParams(0, keyB, 0)))
			requireGood(t, sendPROut(m1, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
			requireGood(t, sendPROut(m1, prNexusA, prOutReserve, PRTypeWriteExclusiveRegistrantsOnly, prParams(keyA, 0, 0)))
			checkGood(t, run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
			g2.deaf = true
			requireGood(t, sendPROut(m1, prNexusA, prOutPreempt, PRTypeWriteExclusiveRegistrantsOnly, prParams(keyA, keyB, 0)))
			for i := 0; i < missed-1; i++ {
				requireGood(t, sendPROut(m1, prNexusA, prOutRegister, 0, prParams(keyA+uint64(i), keyA+uint64(i)+1, 0)))
			}
			g2.deaf = false
			data, v, _ := g2.Load()
			require.NoError(t, g2.r.Apply(data, v))
			requireUA(t, m2, prNexusB2, ReasonRegistrationsPreempted)
			requireConflict(t, run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
			require.Equal(t, g1.r.Version(), g2.r.Version())
		})
	}
}

// TestPRTwoGatewaysPreemptAndAbort: PREEMPT AND ABORT through one device server aborts the
// preempted nexus's commands on the other before it completes, and the victim hears COMMANDS
// CLEARED BY ANOTHER INITIATOR and REGISTRATIONS PREEMPTED there.
func TestPRTwoGatewaysPreemptAndAbort(t *testing.T) {
	_, m1, m2, lu2, gs := gatedABGateways(t)
	requireGood(t, sendPROut(m2, prNexusB2, prOutReserve, PRTypeWriteExclusiveRegistrantsOnly, prParams(keyB, 0, 0)))

	open := gs.Gate(3 * 512)
	running := start(m2, prNexusB2, 1, TaskSimple, cdb10(0x2A, 0, 3, 1), fill(512, 3), 0)
	gs.RequireEntered(t, 3*512)
	pa := start(m1, prNexusA, 3, TaskSimple, prOutCDB(prOutPreemptAndAbort, PRTypeExclusiveAccess, 24), prParams(keyA, keyB, 0), 0)
	testutil.WaitFor(t, "PREEMPT AND ABORT to wait for the write on the other device server", func() bool { return lu2.aborters() == 1 })
	requirePreemptedAndAborted(t, open, pa, running, m2, prNexusB2)
	requireUA(t, m1, prNexusA, ReasonNone)
}

// prModel is a reference model of REGISTER, RESERVE and PREEMPT with the Write Exclusive and
// Exclusive Access types, written apart from the implementation: registrations by I_T nexus,
// the holder and the type.
type prModel struct {
	keys       map[ITNexusID]uint64
	holder     ITNexusID
	resType    byte
	generation uint32
}

// prModelOp is one command of the race: service action, from, key, service action key, type.
type prModelOp struct {
	from          ITNexusID
	sa            byte
	key, saKey    uint64
	typ           byte
	gateway, slot int
}

// apply runs op on the model and reports whether it changed the state.
func (md *prModel) apply(op prModelOp) bool {
	k, registered := md.keys[op.from]
	switch op.sa {
	case prOutRegister:
		if registered {
			if k != op.key {
				return false
			}
			if op.saKey == 0 {
				delete(md.keys, op.from)
				if md.resType != 0 && md.holder == op.from {
					md.resType = 0
				}
			} else {
				md.keys[op.from] = op.saKey
			}
			md.generation++
			return true
		}
		if op.key != 0 || op.saKey == 0 {
			return false
		}
		md.keys[op.from] = op.saKey
		md.generation++
		return true
	case prOutReserve:
		if !registered || k != op.key || md.resType != 0 {
			return false
		}
		md.holder, md.resType = op.from, op.typ
		return true
	case prOutPreempt:
		if !registered || k != op.key || op.saKey == 0 {
			return false
		}
		if md.resType != 0 && md.keys[md.holder] == op.saKey {
			for n, nk := range md.keys {
				if nk == op.saKey && n != op.from {
					delete(md.keys, n)
				}
			}
			md.holder, md.resType = op.from, op.typ
			md.generation++
			return true
		}
		found := false // the preempting nexus's own registration counts, and stays
		for n, nk := range md.keys {
			if nk == op.saKey {
				found = true
				if n != op.from {
					delete(md.keys, n)
				}
			}
		}
		if found {
			md.generation++
		}
		return found
	}
	return false
}

// TestPRTwoGatewaysRace: REGISTER, RESERVE and PREEMPT race from both device servers, 1000 of
// them from I_T nexuses through both. Every stored version must be the model's state after the
// operation that committed it, applied to the version before, and both device servers must end
// with the last one.
func TestPRTwoGatewaysRace(t *testing.T) {
	testPRRace(t, func(t *testing.T, log *prCommitLog) [2]*loggingStore {
		cl := &memPRCluster{}
		var ls [2]*loggingStore
		for i := range ls {
			g := &memPRGateway{cl: cl}
			ls[i] = &loggingStore{PRStore: g, log: log}
			r, err := NewSharedReservations(ls[i])
			require.NoError(t, err)
			r.SetFresh(true)
			g.r, ls[i].r = r, r
			cl.gws = append(cl.gws, g)
		}
		return ls
	}, 500)
}

// testPRRace races REGISTER, RESERVE and PREEMPT from I_T nexuses through two device servers,
// ops from each, over the stores newStores makes (with the reservations each store's gateway
// is for), and checks the stored versions against the model.
func testPRRace(t *testing.T, newStores func(*testing.T, *prCommitLog) [2]*loggingStore, ops int) {
	log := &prCommitLog{}
	stores := newStores(t, log)
	rs := [2]*Reservations{}
	ports := []*TargetPort{testPort, port2}
	var maps []*LUNMap
	var nexuses [2][]*Nexus
	for i := range stores {
		rs[i] = stores[i].r
		maps = append(maps, newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = rs[i] })))
		for j := range 3 {
			n := &Nexus{InitiatorPort: fmt.Sprintf("%d.%d", i, j), InitiatorID: prInitiator(byte(0x10*i + j + 1)), Port: ports[i]}
			nexuses[i] = append(nexuses[i], n)
			clearPowerOnUA(t, maps[i], n)
		}
	}
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			mine := make([]uint64, 3) // the key each nexus last registered, as it believes
			for range ops {
				j := rng.IntN(3)
				n := nexuses[i][j]
				pick := func() uint64 { return uint64(rng.IntN(4)) }
				op := prModelOp{from: n.id(), sa: []byte{prOutRegister, prOutReserve, prOutPreempt}[rng.IntN(3)],
					key: pick(), saKey: pick(), typ: []byte{PRTypeWriteExclusive, PRTypeExclusiveAccess}[rng.IntN(2)]}
				if rng.IntN(4) > 0 {
					op.key = mine[j]
				}
				stores[i].op = op
				c := sendPROut(maps[i], n, op.sa, op.typ, prParams(op.key, op.saKey, 0))
				if c.Status == StatusGood && op.sa == prOutRegister {
					mine[j] = op.saKey
				}
			}
		}()
	}
	wg.Wait()

	md := &prModel{keys: map[ITNexusID]uint64{}}
	for _, e := range log.versions() {
		op := e.op.(prModelOp)
		require.True(t, md.apply(op), "version %d: %+v changes nothing in the model", e.version, op)
		s, _, err := unmarshalShared(e.data)
		require.NoError(t, err)
		got := map[ITNexusID]uint64{}
		for _, r := range s.regs {
			got[r.ITNexusID] = r.Key
		}
		require.Equal(t, md.keys, got, "version %d: %+v", e.version, op)
		require.Equal(t, md.resType, s.resType, "version %d", e.version)
		require.Equal(t, md.generation, s.generation, "version %d", e.version)
		if md.resType != 0 {
			require.Equal(t, md.holder, s.regs[s.holder()].ITNexusID, "version %d", e.version)
		}
	}
	versions := log.versions()
	require.Greater(t, len(versions), ops/5, "enough changes went in")
	require.Positive(t, log.conflicts, "the two sides raced")
	t.Logf("%d versions stored, %d commits refused and retried", len(versions), log.conflicts)
	last := versions[len(versions)-1].version
	for _, r := range rs {
		testutil.WaitFor(t, "both device servers at the last version", func() bool { return r.Version() == last })
		regs, typ, gen := r.Registrations()
		require.Len(t, regs, len(md.keys))
		require.Equal(t, md.resType, typ)
		require.Equal(t, md.generation, gen)
	}
}

// TestPRTwoGatewaysAllTargetPorts: a registration made with ALL_TG_PT through one device server
// covers the initiator port through the other device server's ports too, and REGISTER AND MOVE
// may hand the reservation to an I_T nexus through the other device server's port.
func TestPRTwoGatewaysAllTargetPorts(t *testing.T) {
	a, b, _, m := twoPRGateways("B")(t, PRTypeWriteExclusive)
	requireGood(t, sendPROut(m(prNexusC1), prNexusC1, prOutRegister, 0, prParams(0, keyC, prOutAllTgPt)))
	clearPowerOnUA(t, m(prNexusC2), prNexusC2)
	// C through port 2 is registered: it may read READ KEYS' key list back, and reserve once A
	// releases; A moves its reservation to B through port 2.
	requireGood(t, sendPROut(m(a), a, prOutRegisterAndMove, 0, moveParams(keyA, keyB, 0, 2, srpTID(prNexusB.InitiatorID))))
	k, typ := readReservation(t, m(b), b)
	require.Equal(t, uint64(keyB), k)
	require.Equal(t, byte(PRTypeWriteExclusive), typ)
	checkGood(t, run(m(b), b, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	requireGood(t, sendPROut(m(b), b, prOutRelease, PRTypeWriteExclusive, prParams(keyB, 0, 0)))
	requireGood(t, sendPROut(m(prNexusC2), prNexusC2, prOutReserve, PRTypeExclusiveAccess, prParams(keyC, 0, 0)))
	checkGood(t, run(m(prNexusC1), prNexusC1, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireConflict(t, run(m(a), a, 0, cdb10(0x28, 0, 1, 1), nil, 512))
}

// TestPRApplyWaitsForEffects: while the aborts of a version are being applied (a preempted
// nexus's write still in the backstore), Version does not report it, and a second Apply of
// it (the notify, while the lease renewal applies it) returns only once they are done: what
// the device server acknowledges is never ahead of what it did.
func TestPRApplyWaitsForEffects(t *testing.T) {
	g2, m1, m2, lu2, gs := gatedABGateways(t)
	open := gs.Gate(3 * 512)
	running := start(m2, prNexusB2, 1, TaskSimple, cdb10(0x2A, 0, 3, 1), fill(512, 3), 0)
	gs.RequireEntered(t, 3*512)

	g2.deaf = true // g2 learns of the PREEMPT AND ABORT below by the Apply calls of the test
	requireGood(t, sendPROut(m1, prNexusA, prOutPreemptAndAbort, PRTypeExclusiveAccess, prParams(keyA, keyB, 0)))
	data, v, _ := g2.Load()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- g2.r.Apply(data, v) }()
	testutil.WaitFor(t, "the abort to wait for the running write", func() bool { return lu2.aborters() == 1 })
	require.Less(t, g2.r.Version(), v, "the version's aborts are not done")
	go func() { second <- g2.r.Apply(data, v) }()
	select {
	case <-second:
		t.Fatal("a second Apply returned before the aborts were done")
	case <-time.After(100 * time.Millisecond):
	}
	open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Equal(t, v, g2.r.Version())
	running.wait(t)
	require.True(t, running.c.Aborted())
}
