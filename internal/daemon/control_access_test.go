package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
)

// The helper process of the tests that talk to the control socket as another user: TestMain
// runs controlClient when these are set.
const (
	controlAsEnv   = "SRPTARGET_TEST_CONTROL_AS"   // uid:gid:group,group
	controlPathEnv = "SRPTARGET_TEST_CONTROL_PATH" // the socket
)

// controlClient takes the credentials of as, connects to path and sends each line of stdin as
// a request, printing each answer line; a line "dial: ..." or "read: ..." says what failed.
func controlClient(as, path string) int {
	parts := strings.Split(as, ":")
	uid, _ := strconv.Atoi(parts[0])
	gid, _ := strconv.Atoi(parts[1])
	var groups []int
	for _, g := range strings.Split(parts[2], ",") {
		if n, err := strconv.Atoi(g); err == nil {
			groups = append(groups, n)
		}
	}
	// Go sets the credentials of every thread of the process (syscall.AllThreadsSyscall).
	for _, err := range []error{syscall.Setgroups(groups), syscall.Setgid(gid), syscall.Setuid(uid)} {
		if err != nil {
			fmt.Println("credentials:", err)
			return 2
		}
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("dial:", err)
		return 0
	}
	r := bufio.NewReader(c)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 64<<10) // the daemon's bound on a request line
	for in.Scan() {
		_, _ = fmt.Fprintln(c, in.Text()) // a refused client still reads why
		line, err := r.ReadString('\n')
		if err != nil {
			fmt.Println("read:", err)
			return 0
		}
		fmt.Print(line)
	}
	return 0
}

// The groups and the user of the tests (numbers need not exist in /etc/group).
const (
	testCtlGroup  = 64001
	testReadGroup = 64002
	testUser      = 64010
)

// asUser runs controlClient as uid testUser with primary group gid and groups, sending
// requests; it returns the answer lines and the client's pid.
func asUser(t *testing.T, path string, gid int, groups []int, requests ...string) ([]string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("taking another user's credentials needs root")
	}
	var gs []string
	for _, g := range groups {
		gs = append(gs, strconv.Itoa(g))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), controlPathEnv+"="+path,
		fmt.Sprintf("%s=%d:%d:%s", controlAsEnv, testUser, gid, strings.Join(gs, ",")))
	cmd.Stdin = strings.NewReader(strings.Join(requests, "\n") + "\n")
	out, err := cmd.Output()
	require.NoError(t, err, string(out))
	return strings.Split(strings.TrimSpace(string(out)), "\n"), cmd.Process.Pid
}

// answer decodes an answer line.
func answer(t *testing.T, line string) control.Response {
	t.Helper()
	var rsp control.Response
	require.NoError(t, json.Unmarshal([]byte(line), &rsp), line)
	return rsp
}

// sharedControlEnv is newControlEnv with the socket in a directory every user can enter, as
// /run is.
func sharedControlEnv(t *testing.T, config string) *env {
	t.Helper()
	e := newEnv(t, config)
	dir, err := os.MkdirTemp("", "srpt-ctl-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	e.opts.ControlPath = filepath.Join(dir, "run", "control.sock")
	return e
}

const (
	reqStatus   = `{"version":1,"command":"status"}`
	reqSessions = `{"version":1,"command":"sessions"}`
	reqReload   = `{"version":1,"command":"reload"}`
	reqDryRun   = `{"version":1,"command":"reload","dry_run":true}`
)

// TestControlSocketGroups: what each client may ask is decided by its own credentials, which
// the kernel gives the daemon: a member of --control-read-group reads and may not reload, a
// member of --control-group (as primary or supplementary group) may reload, anyone else is
// refused at once, and every reload is logged with who asked.
func TestControlSocketGroups(t *testing.T) {
	e := sharedControlEnv(t, daemontest.E2EConfig)
	e.opts.ControlGroup = strconv.Itoa(testCtlGroup)
	e.opts.ControlReadGroup = strconv.Itoa(testReadGroup)
	e.start()
	path := e.opts.ControlPath
	for p, mode := range map[string]os.FileMode{path: 0o666, filepath.Dir(path): 0o755} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, mode, fi.Mode().Perm(), p)
	}

	// A stranger: refused with the reason, three times, logged once.
	for range 3 {
		got, _ := asUser(t, path, testUser, nil, reqStatus)
		rsp := answer(t, got[0])
		require.False(t, rsp.OK)
		require.Equal(t, "permission denied: uid 64010 is neither root, the daemon's user nor a member of 64001 (--control-group) or 64002 (--control-read-group)", rsp.Error)
	}
	require.Equal(t, 1, e.Count("control socket: connection refused", "uid", testUser), e.LogText())

	// The read group: status and sessions, not reload, not even a dry run.
	got, _ := asUser(t, path, testUser, []int{testReadGroup}, reqStatus, reqSessions, reqReload, reqDryRun)
	require.Len(t, got, 4)
	require.True(t, answer(t, got[0]).OK)
	require.True(t, answer(t, got[1]).OK)
	for _, l := range got[2:] {
		rsp := answer(t, l)
		require.False(t, rsp.OK)
		require.Equal(t, "permission denied: uid 64010 may only read (status, sessions, luns, stats, acl-check: group 64002); reload needs root, the daemon's user or a member of 64001 (--control-group)", rsp.Error)
	}
	require.Zero(t, e.Count("reload requested on the control socket"))

	// The control group, as the primary group and as a supplementary one: reload, logged
	// with the client's uid and pid.
	got, pid := asUser(t, path, testCtlGroup, nil, reqDryRun)
	require.True(t, answer(t, got[0]).OK, got[0])
	require.Equal(t, 1, e.Count("reload requested on the control socket", "uid", testUser, "gid", testCtlGroup, "pid", pid, "dry_run", true), e.LogText())
	got, pid = asUser(t, path, testUser, []int{testReadGroup, testCtlGroup}, reqReload)
	var res control.ReloadResult
	require.NoError(t, json.Unmarshal(answer(t, got[0]).Result, &res), got[0])
	require.True(t, res.Applied)
	require.Equal(t, 1, e.Count("reload requested on the control socket", "uid", testUser, "gid", testUser, "pid", pid, "dry_run", false), e.LogText())
	require.Equal(t, 1, e.Count("configuration reloaded"))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// waitAnswer reads one answer line from c within d.
func waitAnswer(t *testing.T, c net.Conn, d time.Duration) control.Response {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	return answer(t, line)
}
