package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

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
	rsp := do(t, ch, prInReq(0, 0))
	require.NoError(t, rsp.Err())
	var got []uint64
	for off := 8; off < 8+int(binary.BigEndian.Uint32(rsp.DataIn[4:])); off += 8 {
		got = append(got, binary.BigEndian.Uint64(rsp.DataIn[off:]))
	}
	require.Equal(t, keys, got, "keys")
	rsp = do(t, ch, prInReq(0, 1))
	require.NoError(t, rsp.Err())
	require.Equal(t, uint32(16), binary.BigEndian.Uint32(rsp.DataIn[4:]), "a reservation")
	require.Equal(t, holder, binary.BigEndian.Uint64(rsp.DataIn[8:]))
	require.Equal(t, typ, rsp.DataIn[21])
}

// TestPersistentReservationsSurvive: registrations made through SRP carry the initiator port
// identifier as their TransportID, a reload that replaces the logical unit keeps them, APTPL
// keeps them through a restart of the daemon, and a corrupt state file stops the start.
func TestPersistentReservationsSurvive(t *testing.T) {
	config := e2eConfig + "state_dir: DIR/state\n"
	e := newControlEnv(t, config)
	e.start()
	ch, err := e.login(rwInitiator, "", 5555)
	require.NoError(t, err)
	clearUA(t, ch, 0)
	require.NoError(t, do(t, ch, prOutReq(0, 0x00, 0, 0, 0x1234, 0x01)).Err()) // REGISTER, APTPL
	require.NoError(t, do(t, ch, prOutReq(0, 0x01, 0x06, 0x1234, 0, 0)).Err()) // RESERVE EA-RO
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)

	// READ FULL STATUS: the SRP TransportID of the initiator port, through relative port 1.
	rsp := do(t, ch, prInReq(0, 3))
	require.NoError(t, rsp.Err())
	d := rsp.DataIn[8:]
	require.Equal(t, byte(0x01), d[12], "R_HOLDER")
	require.Equal(t, uint16(1), binary.BigEndian.Uint16(d[18:]))
	require.Equal(t, uint32(24), binary.BigEndian.Uint32(d[20:]))
	require.Equal(t, byte(0x04), d[24], "protocol identifier SRP")
	require.Equal(t, rwInitiator[:], d[32:48])

	// srptarget luns shows them.
	var ls []lunInfo
	e.ctlJSON(&ls, "luns")
	require.Equal(t, &prInfo{Generation: 1, Type: 6, Registrations: []prRegistration{
		{Key: "0x1234", Initiator: rwInitiator.String(), RelativePort: 1, Holder: true},
	}}, ls[0].Reservations)
	require.Nil(t, ls[1].Reservations)
	out, _, err := e.ctl("luns")
	require.NoError(t, err)
	require.Contains(t, out, "  persistent reservation: Exclusive Access, registrants only, generation 1\n    key 0x1234: "+rwInitiator.String()+" via port 1, holder\n")

	serial := e.d.luns[0].key.serial
	file := filepath.Join(e.dir, "state", "pr-"+serial+".json")
	saved, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(saved), `"key": "0x0000000000001234"`)

	// Another initiator (read-only by its source address) conflicts, even for reads.
	other, err := e.login(strangerInitiator, "198.51.100.7", 5555)
	require.NoError(t, err)
	clearUA(t, other, 0)
	rsp, err = other.Read10(context.Background(), 0, 0, 1, 512)
	require.NoError(t, err)
	require.Equal(t, uint8(statusReservationConflict), rsp.Status)
	other.Close()

	// A reload that replaces the logical unit keeps the registrations and the reservation.
	lu0 := e.d.luns[0].lu
	e.writeConfig(strings.Replace(config, "    size: 16MiB\n", "    size: 16MiB\n    vendor: NEWVEND\n", 1))
	require.NoError(t, e.reload())
	require.NotSame(t, lu0, e.d.luns[0].lu)
	clearUA(t, ch, 0)
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)
	ch.Close()

	// A restart restores them from the state file.
	require.NoError(t, e.stop(syscall.SIGINT))
	e.start()
	ch, err = e.login(rwInitiator, "", 5555)
	require.NoError(t, err)
	clearUA(t, ch, 0)
	requireReservation(t, ch, []uint64{0x1234}, 0x1234, 0x06)
	require.Equal(t, 1, e.count("persistent reservations restored (APTPL)", "registrations", 1))
	ch.Close()
	require.NoError(t, e.stop(syscall.SIGINT))

	// A corrupt file is refused, naming the file.
	require.NoError(t, os.WriteFile(file, saved[:len(saved)/2], 0o600))
	require.Equal(t, exitCodeError{1}, runServe(e.opts))
	require.Contains(t, e.logText(), file)
	require.Contains(t, e.logText(), "persistent reservations: not valid")
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
