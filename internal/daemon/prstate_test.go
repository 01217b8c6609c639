package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp/srptest"
)

const statusReservationConflict = 0x18

func prOutReq(lun uint16, sa, typ byte, key, saKey uint64, flags byte) *srptest.Request {
	p := make([]byte, 24)
	binary.BigEndian.PutUint64(p[0:], key)
	binary.BigEndian.PutUint64(p[8:], saKey)
	p[20] = flags
	return &srptest.Request{LUN: lun, CDB: []byte{0x5F, sa, typ, 0, 0, 0, 0, 0, 24, 0}, DataOut: p}
}

func prInReq(lun uint16, sa byte) *srptest.Request {
	return &srptest.Request{LUN: lun, CDB: []byte{0x5E, sa, 0, 0, 0, 0, 0, 0x10, 0x00, 0}, DataInLen: 4096}
}

// requireReservation checks READ KEYS and READ RESERVATION through ch.
func requireReservation(t *testing.T, ch *srptest.Channel, keys []uint64, holder uint64, typ byte) {
	t.Helper()
	rsp := daemontest.Do(t, ch, prInReq(0, 0))
	require.NoError(t, rsp.Err())
	var got []uint64
	for off := 8; off < 8+int(binary.BigEndian.Uint32(rsp.DataIn[4:])); off += 8 {
		got = append(got, binary.BigEndian.Uint64(rsp.DataIn[off:]))
	}
	require.Equal(t, keys, got, "keys")
	rsp = daemontest.Do(t, ch, prInReq(0, 1))
	require.NoError(t, rsp.Err())
	require.Equal(t, uint32(16), binary.BigEndian.Uint32(rsp.DataIn[4:]), "a reservation")
	require.Equal(t, holder, binary.BigEndian.Uint64(rsp.DataIn[8:]))
	require.Equal(t, typ, rsp.DataIn[21])
}

// TestPersistentReservationsSurvive: registrations made through SRP carry the initiator port
// identifier as their TransportID, a reload that replaces the logical unit keeps them, APTPL
// keeps them through a restart of the daemon, and a corrupt state file stops the start.
func TestPersistentReservationsSurvive(t *testing.T) {
	config := daemontest.E2EConfig + "state_dir: DIR/state\n"
	e := newControlEnv(t, config)
	e.start()
	ch, err := e.Login(daemontest.RWInitiator, "", 5555)
	require.NoError(t, err)
	daemontest.ClearUA(t, ch, 0)
	require.NoError(t, daemontest.Do(t, ch, prOutReq(0, 0x00, 0, 0, 0x1234, 0x01)).Err()) // REGISTER, APTPL
	require.NoError(t, daemontest.Do(t, ch, prOutReq(0, 0x01, 0x06, 0x1234, 0, 0)).Err()) // RESERVE EA-RO
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)

	// READ FULL STATUS: the SRP TransportID of the initiator port, through relative port 1.
	rsp := daemontest.Do(t, ch, prInReq(0, 3))
	require.NoError(t, rsp.Err())
	d := rsp.DataIn[8:]
	require.Equal(t, byte(0x01), d[12], "R_HOLDER")
	require.Equal(t, uint16(1), binary.BigEndian.Uint16(d[18:]))
	require.Equal(t, uint32(24), binary.BigEndian.Uint32(d[20:]))
	require.Equal(t, byte(0x04), d[24], "protocol identifier SRP")
	require.Equal(t, daemontest.RWInitiator[:], d[32:48])

	// srptarget luns shows them.
	var ls []control.LUNInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, &control.PRInfo{Generation: 1, Type: 6, Registrations: []control.PRRegistration{
		{Key: "0x1234", Initiator: daemontest.RWInitiator.String(), RelativePort: 1, Holder: true},
	}}, ls[0].Reservations)
	require.Nil(t, ls[1].Reservations)

	serial := e.d.luns[0].key.serial
	file := filepath.Join(e.Dir, "state", "pr-"+serial+".json")
	saved, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(saved), `"key": "0x0000000000001234"`)

	// Another initiator (read-only by its source address) conflicts, even for reads.
	other, err := e.Login(daemontest.StrangerInitiator, "198.51.100.7", 5555)
	require.NoError(t, err)
	daemontest.ClearUA(t, other, 0)
	rsp, err = other.Read10(context.Background(), 0, 0, 1, 512)
	require.NoError(t, err)
	require.Equal(t, uint8(statusReservationConflict), rsp.Status)
	other.Close()

	// A reload that replaces the logical unit keeps the registrations and the reservation.
	lu0 := e.d.luns[0].lu
	e.WriteConfig(strings.Replace(config, "    size: 16MiB\n", "    size: 16MiB\n    vendor: NEWVEND\n", 1))
	require.NoError(t, e.Reload())
	require.NotSame(t, lu0, e.d.luns[0].lu)
	daemontest.ClearUA(t, ch, 0)
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)
	ch.Close()

	// A restart restores them from the state file.
	require.NoError(t, e.Stop(syscall.SIGINT))
	e.start()
	ch, err = e.Login(daemontest.RWInitiator, "", 5555)
	require.NoError(t, err)
	daemontest.ClearUA(t, ch, 0)
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)
	require.Equal(t, 1, e.Count("persistent reservations restored (APTPL)", "registrations", 1))
	ch.Close()
	require.NoError(t, e.Stop(syscall.SIGINT))

	// A corrupt file is refused, naming the file.
	require.NoError(t, os.WriteFile(file, saved[:len(saved)/2], 0o600))
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Contains(t, e.LogText(), file)
	require.Contains(t, e.LogText(), "persistent reservations: not valid")
}

func TestPRFileName(t *testing.T) {
	for serial, want := range map[string]string{
		"0002c90300a342700000": "pr-0002c90300a342700000.json",
		"disk/1 a":             "pr-disk%2F1%20a.json",
		"..":                   "pr-...json",
	} {
		require.Equal(t, want, prFileName(serial))
	}
}

func TestWriteStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f.json")
	require.NoError(t, writeStateFile(path, []byte("one")))
	require.NoError(t, writeStateFile(path, []byte("two")))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "two", string(got))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
	st, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	require.NoError(t, writeStateFile(path, nil))
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, writeStateFile(path, nil), "removing twice is fine")
}

// plantedConfig is e2eConfig with state_dir DIR/state and LUN 0's serial "planted".
var plantedConfig = strings.Replace(daemontest.E2EConfig, "    size: 16MiB\n", "    size: 16MiB\n    serial: planted\n", 1) + "state_dir: DIR/state\n"

// plantedReservation is a saved Exclusive Access reservation held by an initiator no one
// configured: were it loaded, it would fence every initiator of the LUN from the start.
const plantedReservation = `{"version":1,"generation":1,"type":3,"registrations":[{"key":"0x0000000000000bad","initiator":"000000000000000000000000deadbeef","relative_target_port":1,"holder":true}]}` + "\n"

// TestPlantedStateFilesRefused is the attack of a local user who plants what serve reads under
// state_dir: a symbolic link to a reservation of their own, a reservation file of their own
// open to everyone, a FIFO, a huge file, or the state directory itself as a link or open to
// everyone. Each stops the start at once (no FIFO blocks it, no huge file is read), with an
// error naming the path and what was found; nothing planted is ever in force.
func TestPlantedStateFilesRefused(t *testing.T) {
	foreign := func(t *testing.T, p string) {
		if os.Geteuid() == 0 {
			require.NoError(t, os.Lchown(p, 65534, 65534))
		}
	}
	cases := []struct {
		name  string
		plant func(t *testing.T, dir, file string) // dir is state_dir, file the LUN's state file
		want  []string
	}{
		{"symbolic link to a reservation", func(t *testing.T, dir, file string) {
			elsewhere := filepath.Join(t.TempDir(), "mine.json")
			require.NoError(t, os.WriteFile(elsewhere, []byte(plantedReservation), 0o600))
			require.NoError(t, os.Symlink(elsewhere, file))
		}, []string{"is a symbolic link (to ", "mine.json), which is not followed"}},
		{"another user's reservation, mode 0666", func(t *testing.T, dir, file string) {
			require.NoError(t, os.WriteFile(file, []byte(plantedReservation), 0o600))
			require.NoError(t, os.Chmod(file, 0o666))
			foreign(t, file)
		}, []string{"refusing the saved persistent reservations: ", "its mode 0666 lets its group and others write it", "`chmod go-w " + "FILE`"}},
		{"a FIFO", func(t *testing.T, dir, file string) {
			require.NoError(t, syscall.Mkfifo(file, 0o600))
		}, []string{"is not a regular file (a FIFO)"}},
		{"a huge file", func(t *testing.T, dir, file string) {
			require.NoError(t, os.WriteFile(file, nil, 0o600))
			require.NoError(t, os.Truncate(file, 1<<40)) // sparse: a TiB that costs nothing to plant
		}, []string{"1099511627776 bytes, more than the 1048576 a state file can hold"}},
		{"a directory", func(t *testing.T, dir, file string) {
			require.NoError(t, os.Mkdir(file, 0o700))
		}, []string{"is not a regular file (a directory)"}},
		{"state_dir a symbolic link", func(t *testing.T, dir, file string) {
			elsewhere := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(elsewhere, filepath.Base(file)), []byte(plantedReservation), 0o600))
			require.NoError(t, os.Remove(dir))
			require.NoError(t, os.Symlink(elsewhere, dir))
		}, []string{"state DIR: is a symbolic link (to "}},
		{"state_dir open to everyone", func(t *testing.T, dir, file string) {
			require.NoError(t, os.WriteFile(file, []byte(plantedReservation), 0o600))
			require.NoError(t, syscall.Chmod(dir, 0o1777)) // as /tmp
		}, []string{"state DIR: refusing the state directory: its mode 1777 lets its group and others write it"}},
		{"state_dir of another user", func(t *testing.T, dir, file string) {
			if os.Geteuid() != 0 {
				t.Skip("only root can give a directory away")
			}
			require.NoError(t, os.WriteFile(file, []byte(plantedReservation), 0o600))
			foreign(t, dir)
		}, []string{"state DIR: refusing the state directory: it is owned by uid 65534"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, plantedConfig)
			dir := filepath.Join(e.Dir, "state")
			file := filepath.Join(dir, "pr-planted.json")
			require.NoError(t, os.Mkdir(dir, 0o700))
			tc.plant(t, dir, file)
			done := make(chan error, 1)
			go func() { done <- runServe(e.opts) }()
			select {
			case err := <-done:
				require.Equal(t, ExitError{1}, err)
			case <-time.After(5 * time.Second):
				t.Fatal("serve did not return in 5 s")
			}
			entries := e.Logs.FilterMessage("configuration error").All()
			require.NotEmpty(t, entries, e.LogText()) // one per LUN for state_dir itself
			msg := entries[0].ContextMap()["error"].(string)
			require.Contains(t, msg, "state_dir: lun 0: reading the persistent reservations: ")
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "FILE", file)
				w = strings.ReplaceAll(w, "DIR", dir)
				require.Contains(t, msg, w)
			}
			require.Zero(t, e.Count("persistent reservations restored (APTPL)"))
		})
	}
}

// TestPlantedStateFileOnReload: a reload that adds a LUN whose state file is a FIFO fails at
// once and keeps the running configuration, which goes on serving.
func TestPlantedStateFileOnReload(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig+"state_dir: DIR/state\n")
	e.start()
	dir := filepath.Join(e.Dir, "state")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pr-planted.json"), 0o600))
	e.WriteConfig(plantedConfig)
	start := time.Now()
	err := e.Reload()
	require.ErrorContains(t, err, "is not a regular file (a FIFO)")
	require.Less(t, time.Since(start), 5*time.Second)
	ch := e.LoginRW()
	require.NoError(t, daemontest.Do(t, ch, prOutReq(0, 0x00, 0, 0, 0x1234, 0)).Err())
	ch.Close()
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestStateFileSaved: what APTPL saves is a private file (0600) in a private directory.
func TestStateFileSaved(t *testing.T) {
	e := newEnv(t, plantedConfig)
	e.start()
	ch := e.LoginRW()
	require.NoError(t, daemontest.Do(t, ch, prOutReq(0, 0x00, 0, 0, 0x1234, 0x01)).Err()) // REGISTER, APTPL
	ch.Close()
	require.NoError(t, e.Stop(syscall.SIGTERM))
	st, err := os.Lstat(filepath.Join(e.Dir, "state", "pr-planted.json"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode())
	st, err = os.Lstat(filepath.Join(e.Dir, "state"))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|0o700, st.Mode())
	// And it is read back.
	e.start()
	require.Equal(t, 1, e.Count("persistent reservations restored (APTPL)", "registrations", 1))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestSpecIPTAttackOverFabric is the attack through the whole daemon: an initiator sends
// REGISTER with SPEC_I_PT and 8 MiB of distinct TransportIDs (limits.max_transfer_size's
// default), again and again, while another fences through the same LUN. Every attacking
// command is refused with INSUFFICIENT REGISTRATION RESOURCES, and every one of the victim's
// REGISTERs meanwhile is answered GOOD. The bounds here are loose: memfabric copies the
// attacker's 8 MiB RDMA READ under its one lock, which the victim's SENDs wait for, and the
// copy is slow under -race. The 100 ms bound of the SCSI layer's part, where the quadratic
// work was, is scsi's TestPRSpecIPTAttack.
func TestSpecIPTAttackOverFabric(t *testing.T) {
	const bound, transferBound = 500 * time.Millisecond, time.Second
	victimID := daemontest.PortID(0xbbbb)
	e := newEnv(t, strings.Replace(daemontest.E2EConfig, `["0x0000000000000000000000000000aaaa"]`, `["0x0000000000000000000000000000aaaa", "0x0000000000000000000000000000bbbb"]`, 1))
	e.start()
	attacker := e.MustLogin(daemontest.RWInitiator, "", 5555)
	victim := e.MustLogin(victimID, "", 5555)
	daemontest.ClearUA(t, attacker, 0)
	daemontest.ClearUA(t, victim, 0)

	n := (8<<20 - 28) / 24
	p := make([]byte, 28+24*n)
	binary.BigEndian.PutUint64(p[8:], 0xbad)
	p[20] = 0x08 // SPEC_I_PT
	binary.BigEndian.PutUint32(p[24:], uint32(24*n))
	for i := range n {
		tid := p[28+24*i:]
		tid[0] = 0x04 // SRP
		binary.BigEndian.PutUint32(tid[8:], uint32(i)+1)
	}
	cdb := []byte{0x5F, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(cdb[5:], uint32(len(p)))

	var stop atomic.Bool
	errs := make(chan error, 1)
	var attacks atomic.Int64
	go func() {
		defer close(errs)
		for !stop.Load() {
			start := time.Now()
			rsp, err := attacker.Do(context.Background(), &srptest.Request{LUN: 0, CDB: cdb, DataOut: p})
			took := time.Since(start)
			switch {
			case err != nil:
				errs <- err
				return
			case took >= transferBound:
				errs <- fmt.Errorf("the attacker's 8 MiB list took %v", took)
				return
			case rsp.Status != 0x02 || len(rsp.Sense) < 14 || rsp.Sense[2]&0x0F != 0x05 || rsp.Sense[12] != 0x55 || rsp.Sense[13] != 0x04:
				errs <- fmt.Errorf("the attacker's list: status %#x, sense % x; want INSUFFICIENT REGISTRATION RESOURCES", rsp.Status, rsp.Sense)
				return
			}
			attacks.Add(1)
		}
	}()
	key := uint64(0)
	var worst time.Duration
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 50 || attacks.Load() < 10 && time.Now().Before(deadline); i++ {
		start := time.Now()
		rsp := daemontest.Do(t, victim, prOutReq(0, 0x00, 0, key, key+1, 0))
		worst = max(worst, time.Since(start))
		require.NoError(t, rsp.Err())
		key++
	}
	stop.Store(true)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d attacking lists; the victim's slowest REGISTER: %v", attacks.Load(), worst)
	require.Less(t, worst, bound)
	require.GreaterOrEqual(t, attacks.Load(), int64(10))
	rsp := daemontest.Do(t, victim, prInReq(0, 0)) // READ KEYS: the victim's last key, alone
	require.NoError(t, rsp.Err())
	require.Equal(t, uint32(8), binary.BigEndian.Uint32(rsp.DataIn[4:]))
	require.Equal(t, key, binary.BigEndian.Uint64(rsp.DataIn[8:]))
	attacker.Close()
	victim.Close()
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
