package uring

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/internal/testutil"
)

// TestProbe: where rings work, Probe says so; where a seccomp filter refuses one of the three
// system calls with EPERM (as systemd's SystemCallFilter= does with SystemCallErrorNumber=EPERM),
// Probe reports ErrUnsupported, whichever call it is. The filters run in a child process: a
// seccomp filter cannot be taken off again.
func TestProbe(t *testing.T) {
	if name := os.Getenv("URING_PROBE_DENY"); name != "" {
		probeUnderFilter(name)
		return
	}
	if err := Probe(); errors.Is(err, ErrUnsupported) {
		t.Skipf("io_uring not available here: %v", err)
	} else {
		require.NoError(t, err)
	}
	for _, name := range []string{"io_uring_setup", "io_uring_register", "io_uring_enter"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestProbe$")
			cmd.Env = append(os.Environ(), "URING_PROBE_DENY="+name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "probe: unsupported: ", "%s", out)
			require.Contains(t, string(out), "operation not permitted")
		})
	}
}

// probeUnderFilter installs a filter that fails the system call name with EPERM, runs Probe
// and prints what it says.
func probeUnderFilter(name string) {
	nr := map[string]uint32{"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"io_uring_enter": unix.SYS_IO_URING_ENTER}[name]
	if err := testutil.DenySyscalls(nr); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	err := Probe()
	verdict := "works"
	if errors.Is(err, ErrUnsupported) {
		verdict = "unsupported"
	}
	fmt.Printf("probe: %s: %v\n", verdict, strings.ReplaceAll(fmt.Sprint(err), "\n", " "))
	os.Exit(0)
}
