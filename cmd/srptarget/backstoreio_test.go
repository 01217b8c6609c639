package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/srptest"
)

// backstoreIOConfig is e2eConfig (a file LUN among others) with limits.backstore_io set.
func backstoreIOConfig(mode string) string {
	return strings.Replace(daemontest.E2EConfig, "  buffer_pool_size: 16MiB\n", "  buffer_pool_size: 16MiB\n  backstore_io: "+mode+"\n", 1)
}

// TestBackstoreIO: limits.backstore_io as status and the log report it. sync is what it says;
// where io_uring is refused, as the unit's seccomp filter would refuse it without the
// io_uring calls in its SystemCallFilter= (a child process runs under such a filter), io_uring
// refuses to start and names the key, and auto falls back to sync with a warning that says
// why.
func TestBackstoreIO(t *testing.T) {
	if os.Getenv("SRPT_TEST_DENY_IO_URING") != "" {
		require.NoError(t, testutil.DenySyscalls(unix.SYS_IO_URING_SETUP))
		backstoreIORefused(t)
		return
	}
	e := newControlEnv(t, backstoreIOConfig("sync"))
	e.start()
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, "sync", st.BackstoreIO)
	require.Equal(t, "limits.backstore_io: sync", st.BackstoreIONote)
	out, _, err := e.ctl("status")
	require.NoError(t, err)
	require.Contains(t, out, "\nbackstore I/O: sync (limits.backstore_io: sync)\n")
	require.Equal(t, 1, e.Count("backstore I/O", "engine", "sync", "configured", "sync"))
	rw := e.MustLogin(daemontest.RWInitiator, "", 5555)
	daemontest.ClearUA(t, rw, 1)
	before := ioURingCompletions(t)
	fileLUNReadsBack(t, rw)
	require.Zero(t, ioURingCompletions(t).since(before), "with sync no request went through an io_uring")
	require.NoError(t, e.Stop(os.Interrupt))

	// auto, where io_uring works: the file LUN's reads and writes go through the poll
	// groups' rings (their completion queues move by one a request)
	if err := backstore.ProbeAsync(); err == nil {
		e = newControlEnv(t, backstoreIOConfig("auto"))
		e.start()
		e.ctlJSON(&st, "status")
		require.Equal(t, "io_uring", st.BackstoreIO)
		rw = e.MustLogin(daemontest.RWInitiator, "", 5555)
		daemontest.ClearUA(t, rw, 1)
		before = ioURingCompletions(t)
		fileLUNReadsBack(t, rw)
		require.GreaterOrEqual(t, ioURingCompletions(t).since(before), uint64(2*fileLUNCommands), "the file LUN's commands went through the io_uring")
		require.NoError(t, e.Stop(os.Interrupt))
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestBackstoreIO$", "-test.v")
	cmd.Env = append(os.Environ(), "SRPT_TEST_DENY_IO_URING=1")
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Contains(t, string(got), "--- PASS: TestBackstoreIO")
}

// backstoreIORefused runs in a process where io_uring_setup fails with EPERM.
func backstoreIORefused(t *testing.T) {
	e := newControlEnv(t, backstoreIOConfig("io_uring"))
	err := daemon.Serve(e.opts)
	require.Error(t, err)
	logs := e.LogText()
	require.Contains(t, logs, "limits.backstore_io")
	require.Contains(t, logs, "io_uring does not work here")
	require.Contains(t, logs, "operation not permitted")
	require.Contains(t, logs, "srptarget did not start")

	e = newControlEnv(t, backstoreIOConfig("auto"))
	e.start()
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Equal(t, "sync", st.BackstoreIO)
	require.Contains(t, st.BackstoreIONote, "io_uring does not work here")
	require.Contains(t, st.BackstoreIONote, "operation not permitted")
	require.Equal(t, 1, e.Count("backstore I/O: blocking calls on worker goroutines, io_uring does not work here", "engine", "sync", "configured", "auto"))
	// the file LUN serves on the blocking path
	rw := e.MustLogin(daemontest.RWInitiator, "", 5555)
	daemontest.ClearUA(t, rw, 1)
	fileLUNReadsBack(t, rw)
	require.NoError(t, e.Stop(os.Interrupt))
}

// fileLUNCommands is the writes, and the reads, fileLUNReadsBack sends.
const fileLUNCommands = 32

// fileLUNReadsBack writes a pattern to LUN 1 (daemontest.E2EConfig's file LUN, 512-byte
// blocks) and reads it back, fileLUNCommands times each.
func fileLUNReadsBack(t *testing.T, ch *srptest.Channel) {
	t.Helper()
	for i := range fileLUNCommands {
		data := testutil.Pattern(8*512, i)
		rsp := daemontest.Do(t, ch, &srptest.Request{LUN: 1, CDB: srptest.CDBWrite10(uint32(i*8), 8), DataOut: data})
		require.NoError(t, rsp.Err())
		rsp = daemontest.Do(t, ch, &srptest.Request{LUN: 1, CDB: srptest.CDBRead10(uint32(i*8), 8), DataInLen: len(data)})
		require.NoError(t, rsp.Err())
		require.Equal(t, data, rsp.DataIn, "block %d", i*8)
	}
}

// ringHeads is the completion queue head (completions reaped) of each io_uring this process
// holds, by descriptor, as /proc/self/fdinfo shows them.
type ringHeads map[string]uint64

func ioURingCompletions(t *testing.T) ringHeads {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	heads := ringHeads{}
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target != "anon_inode:[io_uring]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "CqHead:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
				require.NoError(t, err, line)
				heads[fd.Name()] = n
			}
		}
	}
	return heads
}

// since is how far the rings of h moved since before (a ring new since then from 0).
func (h ringHeads) since(before ringHeads) (n uint64) {
	for fd, head := range h {
		n += uint64(uint32(head - before[fd]))
	}
	return n
}
