package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/accept"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// shortHTTPLimits are accept.HTTPLimits a test can wait out.
var shortHTTPLimits = accept.HTTPLimits{
	ReadHeader:     300 * time.Millisecond,
	Read:           time.Second,
	Write:          5 * time.Second,
	Idle:           300 * time.Millisecond,
	MaxConns:       16,
	MaxHeaderBytes: 4096,
}

// closedBy reads c until the server closes it and returns the bytes read, or fails the test
// when c is still open at deadline.
func closedBy(t *testing.T, c net.Conn, deadline time.Time) (string, error) {
	require.NoError(t, c.SetReadDeadline(deadline))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), fmt.Errorf("still open after %v", time.Until(deadline))
	}
	return string(b), nil
}

// TestHTTPEndpointClosesIdleConnections is the attack of a client that opens 1000
// connections to the metrics endpoint and keeps them: a third send nothing, a third send a
// header line and then stall, a third make one request with keep-alive and then idle. Every
// one is closed within the header or idle timeout (or at once, beyond the cap), the daemon
// holds at most maxConns of them at any time, one line is logged, and a scrape then answers.
func TestHTTPEndpointClosesIdleConnections(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	ms, err := startMetrics("127.0.0.1:0", shortHTTPLimits, control.BuildInfo{}, log)
	require.NoError(t, err)
	defer ms.close(log)
	addr := ms.addr.String()
	ln := ms.ln

	const n = 1000
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		conns[i] = c
		switch i % 3 {
		case 1:
			_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\n")
		case 2:
			_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
		}
		require.NoError(t, err)
		require.LessOrEqual(t, ln.Open(), int64(shortHTTPLimits.MaxConns))
	}
	// The timeouts are 300 ms; the deadline leaves a loaded machine time to get there.
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, open, wrong := 0, 0, 0
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := closedBy(t, c, deadline)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				open++
			}
			if strings.HasPrefix(got, "HTTP/1.1 200 OK") {
				answered++
				if i%3 != 2 {
					wrong++
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, open, "connections still open after the timeouts")
	require.Zero(t, wrong, "answers to incomplete requests")
	require.NotZero(t, answered, "some requests within the cap were answered")
	require.Less(t, answered, n/3, "the cap refused some")
	require.Equal(t, 1, logs.FilterMessage("too many connections: closed a new one at once").Len(), "rate-limited")
	require.Eventually(t, func() bool { return ln.Open() == 0 }, 10*time.Second, 10*time.Millisecond)
	scrape(t, addr)
}

// TestPprofEndpointClosesIdleConnections: the pprof endpoint has the same bounds.
func TestPprofEndpointClosesIdleConnections(t *testing.T) {
	log := zap.NewNop()
	ps, err := startPprof("127.0.0.1:0", shortHTTPLimits, log)
	require.NoError(t, err)
	defer ps.close(log)
	c, err := net.Dial("tcp", ps.addr.String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	got, err := closedBy(t, c, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(got, "HTTP/1.1 200 OK"), got)
}

// lockedBuffer is a strings.Builder that a process may write while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// The helper process of TestAcceptSurvivesFileDescriptorExhaustion (TestMain runs it).
const emfileHelperEnv = "SRPTARGET_TEST_EMFILE_CONTROL"

// emfileHelper serves a control socket and a metrics endpoint, then uses up its file
// descriptors under a lowered RLIMIT_NOFILE and says so on stdout; "free" on stdin closes
// them again, the end of stdin stops it. Its log goes to stderr as JSON.
func emfileHelper(path string) int {
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stderr), zapcore.InfoLevel))
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	ln, err := control.Listen(path, "", false, log)
	if err != nil {
		return fail(err)
	}
	policy, err := control.NewPolicy("", "")
	if err != nil {
		return fail(err)
	}
	ctl := control.Serve(ln, path, policy, newControlAnswers(daemonOptions{log: log}), log)
	defer ctl.Close()
	ms, err := startMetrics("127.0.0.1:0", metricsLimits, control.BuildInfo{}, log)
	if err != nil {
		return fail(err)
	}
	defer ms.close(log)
	fmt.Println("ready", ms.addr)

	lim := unix.Rlimit{Cur: 64, Max: 64}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fail(err)
	}
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		} else if err != nil {
			return fail(err)
		}
		held = append(held, f)
	}
	fmt.Println("exhausted")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() != "free" {
	}
	for _, f := range held {
		_ = f.Close()
	}
	fmt.Println("freed")
	for in.Scan() {
	}
	return 0
}

// TestAcceptSurvivesFileDescriptorExhaustion: with every file descriptor of the daemon in use
// (RLIMIT_NOFILE reached), a client of the control socket and one of the metrics endpoint
// wait in the listen queue, and are answered once descriptors are free again; each listener
// logs one warning however often accept(2) failed, and a line when it accepts again.
func TestAcceptSurvivesFileDescriptorExhaustion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), emfileHelperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	next := func(want string) string {
		t.Helper()
		require.True(t, out.Scan(), "helper ended before %q: %s", want, stderr.String())
		require.True(t, strings.HasPrefix(out.Text(), want), out.Text())
		return strings.TrimPrefix(out.Text(), want)
	}
	metricsAddr := strings.TrimSpace(next("ready"))
	next("exhausted")

	ctl, err := net.Dial("unix", path)
	require.NoError(t, err, "the connection waits in the listen queue")
	defer ctl.Close()
	_, err = io.WriteString(ctl, `{"version":1,"command":"status"}`+"\n")
	require.NoError(t, err)
	web, err := net.Dial("tcp", metricsAddr)
	require.NoError(t, err)
	defer web.Close()
	_, err = io.WriteString(web, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	// accept(2) fails with EMFILE meanwhile, again and again (5 ms, 10 ms, ... apart).
	time.Sleep(700 * time.Millisecond)
	_, err = io.WriteString(stdin, "free\n")
	require.NoError(t, err)
	next("freed")

	require.NoError(t, ctl.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := bufio.NewReader(ctl).ReadBytes('\n')
	require.NoError(t, err, "the control socket answers again: %s", stderr.String())
	var rsp control.Response
	require.NoError(t, json.Unmarshal(line, &rsp))
	require.True(t, rsp.OK, string(line))
	require.NoError(t, web.SetReadDeadline(time.Now().Add(10*time.Second)))
	page, err := io.ReadAll(web)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(page), "HTTP/1.1 200 OK"), string(page))

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	type entry struct {
		Msg      string `json:"msg"`
		Listener string `json:"listener"`
		Error    string `json:"error"`
		Failed   int    `json:"failed_accepts"`
	}
	warned, recovered := map[string]int{}, map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var e entry
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		switch e.Msg {
		case "accepting a connection failed: retrying (is RLIMIT_NOFILE too low, or does something hold many descriptors?)":
			require.Contains(t, e.Error, "too many open files")
			warned[e.Listener]++
		case "accepting connections again":
			require.Greater(t, e.Failed, 1, "accept(2) was retried")
			recovered[e.Listener]++
		}
	}
	require.Equal(t, map[string]int{"control socket": 1, "metrics": 1}, warned, stderr.String())
	require.Equal(t, map[string]int{"control socket": 1, "metrics": 1}, recovered, stderr.String())
}
