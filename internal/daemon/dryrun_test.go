package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
)

// blockingRBD replaces openRBD with a cluster whose monitors never answer: each open says so
// on called and waits until release closes, then fails.
func blockingRBD(t *testing.T) (called chan string, release chan struct{}) {
	called, release = make(chan string, 8), make(chan struct{})
	saved := openRBD
	openRBD = func(r *config.RBD, _ uint32, _ bool) (backstore.Backstore, error) {
		called <- r.MonHost
		<-release
		return nil, errors.New("no monitor answered within rados_mount_timeout")
	}
	t.Cleanup(func() { openRBD = saved })
	return called, release
}

// answersWhileOpening waits until what (a dry run, a reload) opens rbdConfig's image, which
// blockingRBD holds, and requires the daemon to answer status, sessions and luns meanwhile,
// each within 5 s.
func (e *env) answersWhileOpening(called <-chan string, what string) {
	e.T.Helper()
	select {
	case mon := <-called:
		require.Equal(e.T, "192.0.2.9", mon)
	case <-time.After(10 * time.Second):
		e.T.Fatalf("the %s did not open the RBD image", what)
	}
	for _, cmd := range []string{"status", "sessions", "luns"} {
		start := time.Now()
		var v any
		require.NoError(e.T, e.ctlErr(&v, cmd), "%s while the %s waits", cmd, what)
		require.Less(e.T, time.Since(start), 5*time.Second, cmd)
	}
}

// plantedSecrets makes what a client must not learn about through a dry run: a directory only
// root enters, holding a link to a file, a FIFO and a state file of persistent reservations.
func plantedSecrets(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "target.img"), make([]byte, 1<<20), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(dir, "target.img"), filepath.Join(dir, "link.img")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo.img"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pr-evil0001.json"), []byte("TOPSECRET"), 0o600))
	return dir
}

// probingConfig is e2eConfig (DIR: edir) plus LUNs that name what is in dir and an RBD
// image on a monitor that never answers, and state_dir dir.
func probingConfig(edir, dir string) string {
	return "state_dir: " + dir + "\n" + strings.ReplaceAll(strings.Replace(rbdConfig(), "acls:\n", `  - lun: 5
    backstore: file
    path: `+dir+`/link.img
  - lun: 6
    backstore: file
    path: `+dir+`/fifo.img
    read_only: true
    serial: evil0001
acls:
`, 1), "DIR", edir)
}

// rbdConfig is e2eConfig plus LUN 7 on an RBD image whose monitor never answers.
func rbdConfig() string {
	return strings.Replace(daemontest.E2EConfig, "acls:\n", `  - lun: 7
    backstore: rbd
    rbd: {image: img, mon_host: "192.0.2.9", rados_mount_timeout: 1h}
acls:
`, 1)
}

// dryRunRequest is validate --diff's request for text.
func dryRunRequest(t *testing.T, text string) string {
	b, err := json.Marshal(control.Request{Version: control.Version, Command: "reload", DryRun: true, ConfigYAML: text, ConfigName: "evil.yaml"})
	require.NoError(t, err)
	return string(b)
}

// TestDryRunOfAClientsTextIsTextOnly is the attack of a member of --control-group who is not
// root: a dry run (validate --diff) of a configuration naming a link in a directory only root
// enters, a FIFO, a state_dir with a planted reservation file and an RBD image whose monitor
// never answers. The daemon plans the text only: the answer comes at once, says that the
// paths were not checked and tells nothing of them; no monitor is called.
func TestDryRunOfAClientsTextIsTextOnly(t *testing.T) {
	called, release := blockingRBD(t)
	defer close(release)
	dir := plantedSecrets(t)
	e := sharedControlEnv(t, daemontest.E2EConfig)
	e.opts.ControlGroup = strconv.Itoa(testCtlGroup)
	e.start()

	start := time.Now()
	got, _ := asUser(t, e.opts.ControlPath, testCtlGroup, nil, dryRunRequest(t, probingConfig(e.Dir, dir)), reqStatus)
	took := time.Since(start)
	require.Len(t, got, 2, got)
	rsp := answer(t, got[0])
	require.True(t, rsp.OK, got[0])
	var res control.ReloadResult
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.True(t, res.PathsNotChecked)
	require.Empty(t, res.Errors)
	require.Equal(t, []int{5, 6, 7}, res.LUNsAdded)
	require.Equal(t, []int{0, 1}, res.LUNsUnchanged)
	for _, secret := range []string{"TOPSECRET", "symbolic link", "target.img", "regular", "fifo", "no such", "denied", "monitor"} {
		require.NotContains(t, got[0], secret)
	}
	require.True(t, answer(t, got[1]).OK, "status")
	select {
	case mon := <-called:
		t.Fatalf("the daemon connected to the client's monitor %s", mon)
	default:
	}
	// Nothing that could wait ran: the whole exchange, two processes started included, is
	// far below the 1 h rados_mount_timeout the client asked for.
	require.Less(t, took, time.Minute)
	require.Equal(t, 1, e.Count("planning a reload without applying it (dry run)", "config", "evil.yaml", "paths_checked", false))
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestDryRunChecksRunOutsideTheLock: for root the dry run of the same text opens the
// backstores to check them, but not under the daemon lock: while the RBD image's monitor does
// not answer, status, sessions and a SIGHUP reload are served; once it gives up, the answer
// has every error, the checks' included. A dry run still waiting does not hold up the
// shutdown either.
func TestDryRunChecksRunOutsideTheLock(t *testing.T) {
	called, release := blockingRBD(t)
	dir := plantedSecrets(t)
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()

	c, err := net.Dial("unix", e.opts.ControlPath)
	require.NoError(t, err)
	defer c.Close()
	ask := func(text string) {
		t.Helper()
		_, err := c.Write([]byte(dryRunRequest(t, strings.ReplaceAll(text, "DIR", e.Dir)) + "\n"))
		require.NoError(t, err)
	}
	ask(rbdConfig())
	e.answersWhileOpening(called, "dry run")
	require.NoError(t, e.Reload(), "a reload while the dry run waits")
	close(release)
	rsp := waitAnswer(t, c, 10*time.Second)
	require.True(t, rsp.OK, rsp.Error)
	var res control.ReloadResult
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.False(t, res.PathsNotChecked)
	require.Len(t, res.Errors, 1)
	require.Contains(t, res.Errors[0], "evil.yaml:17: luns[2]: opening the backstore: no monitor answered within rados_mount_timeout")

	// The paths of the text are looked at for root, as validate does.
	ask(probingConfig(e.Dir, dir))
	rsp = waitAnswer(t, c, 10*time.Second)
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	joined := strings.Join(res.Errors, "\n")
	require.Contains(t, joined, "luns[3].path: "+dir+"/link.img is a symbolic link to "+dir+"/target.img")
	require.Contains(t, joined, "luns[4].path: "+dir+"/fifo.img is not a regular file")

	// And the state files a reload would read: the planted one is refused, with its path.
	ask("state_dir: " + dir + "\n" + strings.Replace(daemontest.E2EConfig, "acls:\n", "  - lun: 6\n    backstore: memory\n    size: 1MiB\n    serial: evil0001\nacls:\n", 1))
	rsp = waitAnswer(t, c, 10*time.Second)
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.Len(t, res.Errors, 1, res.Errors)
	require.Contains(t, res.Errors[0], "evil.yaml:1: state_dir: lun 6: "+dir+"/pr-evil0001.json: ")
	require.Contains(t, res.Errors[0], "(move the file away to start without them)")

	// Again, and SIGTERM while the monitor does not answer: the daemon stops, the client is
	// told why.
	called, release = blockingRBD(t)
	defer close(release)
	ask(rbdConfig())
	<-called
	require.NoError(t, e.Stop(syscall.SIGTERM))
	rsp = waitAnswer(t, c, 10*time.Second)
	require.Equal(t, "the daemon is shutting down", rsp.Error)
}

// TestDryRunRealMonitorNeverAnswers is TestDryRunChecksRunOutsideTheLock with librados and a
// monitor address that accepts connections and never answers: root's dry run waits for
// rados_mount_timeout outside the daemon lock (status answers meanwhile) and reports it.
func TestDryRunRealMonitorNeverAnswers(t *testing.T) {
	if !rbdBuilt {
		t.Skip("built without the build tag rbd: no librados to wait for the monitor")
	}
	mon, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer mon.Close()
	go func() {
		for {
			c, err := mon.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	text := strings.ReplaceAll(strings.Replace(daemontest.E2EConfig, "acls:\n", `  - lun: 7
    backstore: rbd
    rbd: {image: img, mon_host: "`+mon.Addr().String()+`", rados_mount_timeout: 3s}
acls:
`, 1), "DIR", e.Dir)
	c, err := net.Dial("unix", e.opts.ControlPath)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = c.Write([]byte(dryRunRequest(t, text) + "\n"))
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Less(t, time.Since(start), 3*time.Second, "status waited for the monitor")
	rsp := waitAnswer(t, c, 30*time.Second)
	require.True(t, rsp.OK, rsp.Error)
	var res control.ReloadResult
	require.NoError(t, json.Unmarshal(rsp.Result, &res))
	require.Len(t, res.Errors, 1, res.Errors)
	require.Contains(t, res.Errors[0], "luns[2]: opening the backstore: ")
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// TestReloadOpensBackstoresOutsideTheLock: a reload (SIGHUP or srptarget reload) whose new
// LUN is an RBD image on a monitor that never answers waits for it without the daemon lock:
// status, sessions and luns answer meanwhile, a second SIGHUP waits its turn, and once the
// open fails the reload is refused with the reason and the running configuration is kept. A
// SIGTERM while a reload waits stops the daemon at once.
func TestReloadOpensBackstoresOutsideTheLock(t *testing.T) {
	called, release := blockingRBD(t)
	e := newControlEnv(t, daemontest.E2EConfig)
	e.start()
	e.WriteConfig(rbdConfig())

	e.Sigs <- syscall.SIGHUP
	e.answersWhileOpening(called, "reload")
	e.Sigs <- syscall.SIGHUP // taken once the first is done
	close(release)
	for range 2 {
		select {
		case err := <-e.Reloads:
			require.ErrorContains(t, err, "opening the backstore: no monitor answered within rados_mount_timeout")
		case <-time.After(10 * time.Second):
			t.Fatal("no reload result in 10 s")
		}
	}
	var luns []struct {
		LUN int `json:"lun"`
	}
	e.ctlJSON(&luns, "luns")
	require.Len(t, luns, 2, "the running configuration is kept")

	// Again over the control socket, then SIGTERM while it waits: the daemon stops.
	called, release = blockingRBD(t)
	defer close(release)
	answered := make(chan string, 1)
	go func() {
		// Refused (the control socket closed) or answered with the reload's refusal.
		var res control.ReloadResult
		err := e.ctlErr(&res, "reload")
		answered <- fmt.Sprint(err, res.Errors)
	}()
	<-called
	start := time.Now()
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Less(t, time.Since(start), 10*time.Second)
	select {
	case errOut := <-answered:
		require.Contains(t, errOut, "shutting down")
	case <-time.After(20 * time.Second):
		t.Fatal("the client's reload got no answer")
	}
}
