package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
)

// twoLUNs is a configuration with LUN 0 and LUN 1 (memory), SERIAL0 and SERIAL1 replaced by
// their serial lines.
const twoLUNs = e2eHead + `luns:
  - lun: 0
    backstore: memory
    size: 1MiB
SERIAL0  - lun: 1
    backstore: memory
    size: 1MiB
SERIAL1acls:
  - initiators: ["*"]
    luns: [0, 1]
`

func withSerials(s0, s1 string) string {
	line := func(s string) string {
		if s == "" {
			return ""
		}
		return "    serial: " + s + "\n"
	}
	return strings.NewReplacer("SERIAL0", line(s0), "SERIAL1", line(s1)).Replace(twoLUNs)
}

// TestDuplicateSerialsRefused: two LUNs with one serial (one reservation state, one APTPL
// file, one WWID) are refused by validate, serve and reload, with the lines of both; so is a
// serial that is another LUN's default.
func TestDuplicateSerialsRefused(t *testing.T) {
	file := writeFile(t, "dup.yaml", withSerials("disk1", "disk1"))
	_, errOut, err := run(t, noDeps, "validate", "--config", file)
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, errOut, file+`:16: luns[1].serial: "disk1" is also the serial of luns[0] (line 12): two LUNs with one serial share one persistent reservation state`)

	e := newEnv(t, withSerials("disk1", "DISK-1"))
	require.Equal(t, exitCodeError{1}, runServe(e.opts))
	require.Equal(t, 1, e.count("configuration error", "error",
		e.file+`:16: luns[1].serial: "DISK-1" and the serial of luns[0] (line 12), "disk1", give the same WWID (the NAA designator of VPD page 0x83 keeps only the first 25 hexadecimal digits of a serial, in any case: "d1"), so multipath would take the two LUNs for two paths to one disk; give each LUN a serial with other hexadecimal digits`), e.logText())

	// LUN 0's default serial is id_ext and the LUN number: 0002c90300a34270 0000.
	e = newEnv(t, withSerials("", "0002c90300a342700000"))
	require.Equal(t, exitCodeError{1}, runServe(e.opts))
	require.Equal(t, 1, e.count("configuration error", "error",
		e.file+`:15: luns[1].serial: "0002c90300a342700000" is also the serial of luns[0] (line 9, its default: id_ext and the LUN number): two LUNs with one serial share one persistent reservation state (and its file under state_dir), and initiators see one WWID, so multipath would take them for two paths to one disk; give each LUN its own serial`), e.logText())

	// A reload is refused the same way and changes nothing.
	e = newEnv(t, withSerials("disk1", "disk2"))
	e.start()
	running := e.d.cfg
	e.writeConfig(withSerials("disk2", "disk2"))
	var errs config.Errors
	require.ErrorAs(t, e.reload(), &errs)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), `:16: luns[1].serial: "disk2" is also the serial of luns[0] (line 12)`)
	require.Same(t, running, e.d.cfg)
	require.NoError(t, e.stop(syscall.SIGTERM))
}
