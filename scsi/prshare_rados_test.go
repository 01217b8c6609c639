package scsi

import (
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/prstore"
)

// The shared reservations over the throw-away Ceph cluster of make test-rbd: two device servers,
// each with its own librados client (its own client id, watch and lease), keep one logical
// unit's reservations in one RADOS object.

// The lease is long for a test: the throw-away cluster's one OSD, on a machine that runs the
// other packages' tests meanwhile, answers a read in milliseconds most of the time but has
// been seen to take over a second.
const (
	radosTestLease = 5 * time.Second
	radosTestDrain = 5 * time.Second // the clients' rados_osd_op_timeout
)

var radosObjects atomic.Int64

// radosConns connects two clients to the cluster, or skips.
func radosConns(t *testing.T) (pool string, conns [2]*rbd.Conn) {
	t.Helper()
	conf, pool := os.Getenv("SRPT_RBD_CONF"), os.Getenv("SRPT_RBD_POOL")
	if conf == "" || pool == "" {
		t.Skip("no Ceph cluster: SRPT_RBD_CONF and SRPT_RBD_POOL are not set (make test-rbd starts one)")
	}
	for i := range conns {
		c, err := rbd.Connect(rbd.Options{ConfFile: conf, MountTimeout: 10 * time.Second, OSDOpTimeout: radosTestDrain})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		conns[i] = c
	}
	return pool, conns
}

// radosReservations opens one device server's store on a fresh object name and returns its
// reservations once fresh.
func radosReservations(t *testing.T, conn *rbd.Conn, pool, oid, member string, wrap func(PRStore) PRStore) (*Reservations, *prstore.Store) {
	t.Helper()
	obj, err := conn.OpenObject(pool, "", oid)
	require.NoError(t, err)
	st, err := prstore.Open(prstore.RADOS(obj), prstore.Options{Member: member, Lease: radosTestLease, Drain: radosTestDrain, Log: zap.NewNop()})
	require.NoError(t, err)
	var ps PRStore = st
	if wrap != nil {
		ps = wrap(st)
	}
	r, err := NewSharedReservations(ps)
	require.NoError(t, err)
	st.Attach(r)
	t.Cleanup(func() {
		_ = st.Close()
		_ = obj.Remove()
		obj.Close()
	})
	testutil.WaitFor(t, member+" fresh", r.Fresh)
	return r, st
}

func radosOID(t *testing.T) string {
	return fmt.Sprintf("srpt-pr-test-%d-%d", os.Getpid(), radosObjects.Add(1))
}

// radosPRGateways is twoPRGateways over RADOS.
func radosPRGateways(pool string, conns [2]*rbd.Conn, on string) prTopology {
	return func(t *testing.T, typ byte) (a, b, c *Nexus, m func(*Nexus) *LUNMap) {
		oid := radosOID(t)
		var lms [2]*LUNMap
		for i := range lms {
			r, _ := radosReservations(t, conns[i], pool, oid, fmt.Sprintf("gw%d", i+1), nil)
			lms[i] = newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r }))
		}
		return spreadPRNexuses(t, lms, on, typ)
	}
}

// TestPROutStateMachineRADOS: the state machine's table through two device servers sharing
// the reservations in RADOS gives the answers and unit attentions of one device server.
func TestPROutStateMachineRADOS(t *testing.T) {
	pool, conns := radosConns(t)
	for _, on := range []string{"B", "AC"} {
		t.Run("through the second: "+on, func(t *testing.T) { testPROutStateMachine(t, radosPRGateways(pool, conns, on)) })
	}
}

// TestPRRaceRADOS: REGISTER, RESERVE and PREEMPT race from both device servers, 1000 of them;
// every version stored in RADOS is the model's state after the operation that stored it.
func TestPRRaceRADOS(t *testing.T) {
	pool, conns := radosConns(t)
	testPRRace(t, func(t *testing.T, log *prCommitLog) [2]*loggingStore {
		oid := radosOID(t)
		var ls [2]*loggingStore
		for i := range ls {
			ls[i] = &loggingStore{log: log}
			ls[i].r, _ = radosReservations(t, conns[i], pool, oid, fmt.Sprintf("gw%d", i+1), func(st PRStore) PRStore {
				ls[i].PRStore = st
				return ls[i]
			})
		}
		return ls
	}, 500)
}

// TestPRPartitionedGatewayRADOS: a device server cut off from the cluster (its client
// blocklisted at the OSDs, as a partition looks to the cluster) fails what a reservation could
// conflict with within its lease, before the PREEMPT made through the other device server
// completes; the PREEMPT completes once the cut-off one's lease and drain have passed. Its
// target port is then unavailable in REPORT TARGET PORT GROUPS through it too.
func TestPRPartitionedGatewayRADOS(t *testing.T) {
	pool, conns := radosConns(t)
	oid := radosOID(t)
	r1, _ := radosReservations(t, conns[0], pool, oid, "gw1", nil)
	r2, _ := radosReservations(t, conns[1], pool, oid, "gw2", nil)
	m1 := newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r1 }))
	m2 := newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r2 }))
	clearPowerOnUA(t, m1, prNexusA1)
	clearPowerOnUA(t, m2, prNexusB2)
	requireGood(t, sendPROut(m2, prNexusB2, prOutRegister, 0, prParams(0, keyB, 0)))
	requireGood(t, sendPROut(m2, prNexusB2, prOutReserve, PRTypeWriteExclusive, prParams(keyB, 0, 0)))
	requireGood(t, sendPROut(m1, prNexusA1, prOutRegister, 0, prParams(0, keyA, 0)))
	checkGood(t, run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))

	addrs, err := conns[1].Addrs()
	require.NoError(t, err)
	cmd, _ := json.Marshal(map[string]string{"prefix": "osd blocklist", "blocklistop": "add", "addr": addrs})
	_, err = conns[0].MonCommand(string(cmd))
	require.NoError(t, err)
	t.Cleanup(func() {
		cmd, _ := json.Marshal(map[string]string{"prefix": "osd blocklist", "blocklistop": "rm", "addr": addrs})
		_, _ = conns[0].MonCommand(string(cmd))
	})
	// The first gateway's next operations carry the map with the entry, which makes the OSD
	// refuse the cut-off one's from then on.
	require.NoError(t, conns[0].WaitForLatestOSDMap())
	cut := time.Now()
	stale := make(chan time.Time, 1)
	go func() {
		for r2.Fresh() {
			time.Sleep(5 * time.Millisecond)
		}
		stale <- time.Now()
	}()

	requireGood(t, sendPROut(m1, prNexusA1, prOutPreempt, PRTypeExclusiveAccess, prParams(keyA, keyB, 0)))
	done := time.Now()
	staleAt := <-stale
	t.Logf("the cut-off device server stale %v after the cut; PREEMPT completed %v after the cut", staleAt.Sub(cut), done.Sub(cut))
	require.GreaterOrEqual(t, done.Sub(cut), radosTestLease+radosTestDrain, "waited out the other's lease and drain")
	require.Less(t, staleAt.Sub(cut), radosTestLease, "stale within its lease")
	require.True(t, staleAt.Before(done.Add(-radosTestDrain)), "stale before the change completed, by the drain")
	c := run(m2, prNexusB2, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0)
	requireSense(t, c, ReasonLUNotAccessibleTargetPortUnavailable)
	// Its port's group is reported unavailable through it (it cannot know the shared states),
	// and it changes no state.
	_, st := rtpgStates(t, m2, prNexusB2)
	require.Equal(t, byte(Unavailable), st[1][0])
	requireSense(t, sendSTPG(m2, prNexusB2, groupState{1, Standby}), ReasonLUNotAccessibleTargetPortUnavailable)
}

// dyingStore is a device server's PRStore that dies right after a change is stored: kill cuts
// it off from the cluster as a killed gateway looks to the others (its client blocklisted at
// the OSDs, its watch gone), and Publish, which a dead process never reaches, tells no one.
type dyingStore struct {
	PRStore
	kill     func()
	armed    atomic.Bool
	killedAt time.Time
	version  uint64
}

func (d *dyingStore) Commit(old uint64, data []byte) (bool, error) {
	ok, err := d.PRStore.Commit(old, data)
	if ok && d.armed.Swap(false) {
		d.killedAt, d.version = time.Now(), old+1
		d.kill()
	}
	return ok, err
}

func (d *dyingStore) Publish(v uint64) error {
	if d.version != 0 && v >= d.version {
		return nil
	}
	return d.PRStore.Publish(v)
}

// blocklist cuts conn off from the cluster, through other, until the test ends.
func blocklist(t *testing.T, conn, other *rbd.Conn) {
	addrs, err := conn.Addrs()
	require.NoError(t, err)
	cmd, _ := json.Marshal(map[string]string{"prefix": "osd blocklist", "blocklistop": "add", "addr": addrs})
	_, err = other.MonCommand(string(cmd))
	require.NoError(t, err)
	t.Cleanup(func() {
		cmd, _ := json.Marshal(map[string]string{"prefix": "osd blocklist", "blocklistop": "rm", "addr": addrs})
		_, _ = other.MonCommand(string(cmd))
	})
	require.NoError(t, other.WaitForLatestOSDMap())
}

// TestPRGatewayKilledMidPreemptRADOS: a device server dies between storing a PREEMPT AND ABORT
// and telling the others. The change is in force: the other device server learns it by its
// own renewals (within a quarter of its lease, measured), gives the preempted initiator
// REGISTRATIONS PREEMPTED and then RESERVATION CONFLICT, and the initiator's PREEMPT retried
// through it, its first path having died, ends in RESERVATION CONFLICT: the key it preempts is
// gone.
func TestPRGatewayKilledMidPreemptRADOS(t *testing.T) {
	pool, conns := radosConns(t)
	oid := radosOID(t)
	var dying *dyingStore
	r1, _ := radosReservations(t, conns[0], pool, oid, "gw1", func(st PRStore) PRStore {
		dying = &dyingStore{PRStore: st}
		return dying
	})
	r2, _ := radosReservations(t, conns[1], pool, oid, "gw2", nil)
	dying.kill = func() { blocklist(t, conns[0], conns[1]) }
	m1 := newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r1 }))
	m2 := newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r2 }))
	for _, n := range []*Nexus{prNexusA1, prNexusA2, prNexusB2} {
		m := m1
		if n.Port == port2 {
			m = m2
		}
		clearPowerOnUA(t, m, n)
	}
	// A registers through both gateways, as fence_scsi does through every path; B holds an
	// exclusive access reservation through the second.
	requireGood(t, sendPROut(m2, prNexusB2, prOutRegister, 0, prParams(0, keyB, 0)))
	requireGood(t, sendPROut(m2, prNexusB2, prOutReserve, PRTypeExclusiveAccess, prParams(keyB, 0, 0)))
	requireGood(t, sendPROut(m1, prNexusA1, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m2, prNexusA2, prOutRegister, 0, prParams(0, keyA, 0)))
	write := cdb10(0x2A, 0, 1, 1)
	checkGood(t, run(m2, prNexusB2, 0, write, make([]byte, 512), 0))

	dying.armed.Store(true)
	sendPROut(m1, prNexusA1, prOutPreemptAndAbort, PRTypeExclusiveAccess, prParams(keyA, keyB, 0)) // its answer never leaves a killed gateway
	require.NotZero(t, dying.version, "the PREEMPT was stored")
	testutil.WaitFor(t, "the other gateway applied the stored PREEMPT", func() bool { return r2.Version() >= dying.version })
	learned := time.Since(dying.killedAt)
	t.Logf("the other device server applied the PREEMPT %v after it was stored, without a notification (lease %v, renewed every %v)",
		learned, radosTestLease, radosTestLease/4)
	require.Less(t, learned, radosTestLease, "within the lease its last renewal gave")
	requireSense(t, run(m2, prNexusB2, 0, write, make([]byte, 512), 0), ReasonRegistrationsPreempted)
	require.Equal(t, StatusReservationConflict, run(m2, prNexusB2, 0, write, make([]byte, 512), 0).Status)
	require.Equal(t, StatusReservationConflict,
		sendPROut(m2, prNexusA2, prOutPreemptAndAbort, PRTypeExclusiveAccess, prParams(keyA, keyB, 0)).Status,
		"the retried PREEMPT: key B is gone")
	regs, typ, _ := r2.Registrations()
	require.Len(t, regs, 2)
	require.Equal(t, uint8(PRTypeExclusiveAccess), typ)
}
