package daemon

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
)

// TestDuplicateSerialsRefused: two LUNs with one serial (one reservation state, one APTPL
// file, one WWID) are refused by serve and reload, with the lines of both; so is a serial
// that is another LUN's default. (validate: cmd/srptarget's TestValidateRefusesDuplicateSerials.)
func TestDuplicateSerialsRefused(t *testing.T) {
	e := newEnv(t, daemontest.WithSerials("disk1", "DISK-1"))
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("configuration error", "error",
		e.File+`:16: luns[1].serial: "DISK-1" and the serial of luns[0] (line 12), "disk1", give the same WWID (the NAA designator of VPD page 0x83 keeps only the first 25 hexadecimal digits of a serial, in any case: "d1"), so multipath would take the two LUNs for two paths to one disk; give each LUN a serial with other hexadecimal digits`), e.LogText())

	// LUN 0's default serial is id_ext and the LUN number: 0002c90300a34270 0000.
	e = newEnv(t, daemontest.WithSerials("", "0002c90300a342700000"))
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("configuration error", "error",
		e.File+`:15: luns[1].serial: "0002c90300a342700000" is also the serial of luns[0] (line 9, its default: id_ext and the LUN number): two LUNs with one serial share one persistent reservation state (and its file under state_dir), and initiators see one WWID, so multipath would take them for two paths to one disk; give each LUN its own serial`), e.LogText())

	// A reload is refused the same way and changes nothing.
	e = newEnv(t, daemontest.WithSerials("disk1", "disk2"))
	e.start()
	running := e.d.cfg
	e.WriteConfig(daemontest.WithSerials("disk2", "disk2"))
	var errs config.Errors
	require.ErrorAs(t, e.Reload(), &errs)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), `:16: luns[1].serial: "disk2" is also the serial of luns[0] (line 12)`)
	require.Same(t, running, e.d.cfg)
	require.NoError(t, e.Stop(syscall.SIGTERM))
}
