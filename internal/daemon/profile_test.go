package daemon

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// cpuSink keeps the compiler from removing the loops of the burn functions.
var cpuSink uint64

// burnCPU spins until the process has used d more CPU time, so that a 100 Hz profile holds
// samples of its caller however busy the machine is.
func burnCPU(t *testing.T, d time.Duration) {
	t.Helper()
	// The CPU time of this thread, not of the process: with other tests and the race
	// detector's threads busy, the process's CPU time could pass d while this function
	// collected hardly a sample of its own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPUTime(t)
	for threadCPUTime(t)-start < d {
		for i := range 1 << 16 {
			cpuSink += uint64(i) * 2654435761
		}
	}
}

func threadCPUTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_THREAD, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The windows burn a second of their thread's CPU (about 100 samples at the profiler's 100 Hz):
// with 200 ms the profile under a loaded machine (the race detector, other packages' tests)
// missed the window's function about one run in ten.
//
//go:noinline
func profiledWindowA(t *testing.T) { burnCPU(t, time.Second) }

//go:noinline
func profiledWindowB(t *testing.T) { burnCPU(t, time.Second) }

// readProfile checks that path holds a complete gzip stream (magic, CRC and length) of a
// runtime/pprof CPU profile, whose string table names the sample types "samples/count" and
// "cpu/nanoseconds", and returns the uncompressed protocol buffer.
func readProfile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Greater(t, len(raw), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, raw[:2], "gzip magic")
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	pb, err := io.ReadAll(zr)
	require.NoError(t, err, "the gzip stream is complete")
	require.NoError(t, zr.Close())
	for _, s := range []string{"samples", "count", "cpu", "nanoseconds"} {
		require.True(t, bytes.Contains(pb, []byte(s)), "the profile has no string %q: not a CPU profile", s)
	}
	return pb
}

// profileSignal sends sig and waits until it is handled.
func (e *env) profileSignal(sig os.Signal, handled <-chan struct{}) {
	e.T.Helper()
	e.Sigs <- sig
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		e.T.Fatalf("%v not handled in 10 s", sig)
	}
}

func TestCPUProfileWholeRun(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	prof := filepath.Join(e.Dir, "cpu.pprof")
	e.opts.CPUProfile = prof
	e.start()
	require.Equal(t, 1, e.Count("CPU profile started", "path", prof, "trigger", "start-up"))
	profiledWindowA(t)
	_, err := os.Stat(prof)
	require.ErrorIs(t, err, os.ErrNotExist, "written only at exit")
	require.NoError(t, e.Stop(syscall.SIGTERM))

	pb := readProfile(t, prof)
	require.True(t, bytes.Contains(pb, []byte("profiledWindowA")), "the profile holds the samples of the run")
	_, err = os.Stat(prof + ".tmp")
	require.ErrorIs(t, err, os.ErrNotExist)
	written := e.Logs.FilterMessage("CPU profile written").All()
	require.Len(t, written, 1)
	fi, err := os.Stat(prof)
	require.NoError(t, err)
	m := written[0].ContextMap()
	require.Equal(t, prof, m["path"])
	require.Equal(t, "exit", m["trigger"])
	require.Equal(t, fi.Size(), m["bytes"])
	require.GreaterOrEqual(t, m["duration"], 200*time.Millisecond)
	// The profile covers the shutdown: it is written after it, before the last line.
	all := e.Logs.All()
	require.Equal(t, "stopped", all[len(all)-1].Message)
	require.Equal(t, "CPU profile written", all[len(all)-2].Message)
}

func TestCPUProfileSignalWindows(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	prof := filepath.Join(e.Dir, "cpu.pprof")
	e.opts.CPUProfile = prof
	e.opts.CPUProfileWait = true
	handled := make(chan struct{}, 1)
	e.opts.afterProfileSignal = func() { handled <- struct{}{} }
	e.start()
	require.Equal(t, 1, e.Count("CPU profile: waiting for SIGUSR1 to start one, SIGUSR2 writes it", "path", prof))
	require.Zero(t, e.Logs.FilterMessage("CPU profile started").Len())
	_, err := os.Stat(prof + ".tmp")
	require.ErrorIs(t, err, os.ErrNotExist, "the writability check leaves nothing behind")

	// SIGUSR2 with no profile running writes nothing.
	e.profileSignal(syscall.SIGUSR2, handled)
	require.Equal(t, 1, e.Count("SIGUSR2: no CPU profile runs, nothing written (SIGUSR1 starts one)", "path", prof))
	_, err = os.Stat(prof)
	require.ErrorIs(t, err, os.ErrNotExist)

	// Window 1: SIGUSR1 ... SIGUSR2.
	e.profileSignal(syscall.SIGUSR1, handled)
	require.Equal(t, 1, e.Count("CPU profile started", "path", prof, "trigger", "SIGUSR1"))
	profiledWindowA(t)
	e.profileSignal(syscall.SIGUSR2, handled)
	require.Equal(t, 1, e.Count("CPU profile written", "path", prof, "trigger", "SIGUSR2"))
	pb := readProfile(t, prof)
	require.True(t, bytes.Contains(pb, []byte("profiledWindowA")))
	require.False(t, bytes.Contains(pb, []byte("profiledWindowB")))
	first := prof + ".1"
	require.NoError(t, os.Rename(prof, first))

	// Window 2: a second SIGUSR1 discards what the first collected; SIGUSR2 writes FILE again.
	e.profileSignal(syscall.SIGUSR1, handled)
	profiledWindowA(t)
	e.profileSignal(syscall.SIGUSR1, handled)
	require.Equal(t, 1, e.Logs.FilterMessage("CPU profile discarded: a new one starts").Len())
	profiledWindowB(t)
	e.profileSignal(syscall.SIGUSR2, handled)
	pb = readProfile(t, prof)
	require.True(t, bytes.Contains(pb, []byte("profiledWindowB")))
	require.False(t, bytes.Contains(pb, []byte("profiledWindowA")), "the discarded window is not in the profile")
	readProfile(t, first)

	// No profile runs at exit: nothing more is written.
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Equal(t, 2, e.Logs.FilterMessage("CPU profile written").Len())
	require.Zero(t, e.Logs.FilterMessage("CPU profile lost").Len())
}

func TestCPUProfileUnwritableFailsStart(t *testing.T) {
	for _, wait := range []bool{false, true} {
		for _, tt := range []struct {
			name string
			path func(dir string) string
			want string
		}{
			{
				name: "no such directory",
				path: func(dir string) string { return filepath.Join(dir, "missing", "cpu.pprof") },
				want: "--cpuprofile DIR/missing/cpu.pprof: open DIR/missing/cpu.pprof.tmp: no such file or directory",
			},
			{
				name: "a directory",
				path: func(dir string) string { return dir },
				want: "--cpuprofile DIR: is a directory",
			},
		} {
			t.Run(fmt.Sprintf("%s/wait=%v", tt.name, wait), func(t *testing.T) {
				e := newEnv(t, daemontest.E2EConfig)
				e.opts.CPUProfile = tt.path(e.Dir)
				e.opts.CPUProfileWait = wait
				require.Equal(t, ExitError{1}, runServe(e.opts))
				require.Equal(t, 1, e.Count("start-up failed", "error", strings.ReplaceAll(tt.want, "DIR", e.Dir)), e.LogText())
				require.Equal(t, 1, e.Count("srptarget did not start", "errors", 1))
				// The daemon did not start: no file created, the port is free.
				_, err := os.Stat(filepath.Join(e.Dir, "lun1.img"))
				require.ErrorIs(t, err, os.ErrNotExist)
				ln, err := e.Node.Listen(5555)
				require.NoError(t, err)
				require.NoError(t, ln.Close())
			})
		}
	}
}

func TestCPUProfileWrittenWhenTheStartFails(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	other, err := e.Node.Listen(5555)
	require.NoError(t, err)
	defer other.Close()
	prof := filepath.Join(e.Dir, "cpu.pprof")
	e.opts.CPUProfile = prof
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("srptarget did not start", "errors", 1))
	require.Equal(t, 1, e.Count("CPU profile written", "path", prof, "trigger", "exit"))
	readProfile(t, prof)
}

func TestCPUProfileWrittenOnSecondSignal(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	prof := filepath.Join(e.Dir, "cpu.pprof")
	e.opts.CPUProfile = prof
	got := make(chan int, 1)
	var atExit []byte
	e.opts.beforeShutdown = func() {
		e.Sigs <- os.Interrupt
		got <- <-e.Exits
		// The process would end here: the profile must already be complete.
		atExit, _ = os.ReadFile(prof)
	}
	e.start()
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGINT), <-got)
	final, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Equal(t, final, atExit, "the profile was complete when the process would have exited")
	readProfile(t, prof)
	require.Equal(t, 1, e.Count("CPU profile written", "path", prof, "trigger", "second signal"))
	require.Equal(t, 1, e.Logs.FilterMessage("CPU profile written").Len(), "not written twice")
}

func TestProfileSignalsWithoutCPUProfileAreIgnored(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	handled := make(chan struct{}, 1)
	e.opts.afterProfileSignal = func() { handled <- struct{}{} }
	e.start()
	for _, sig := range []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		e.profileSignal(sig, handled)
		require.Equal(t, 1, e.Count("ignoring signal: SIGUSR1 and SIGUSR2 start and write the CPU profile of --cpuprofile, which is not set",
			"signal", sig))
	}
	ch, err := e.Login(daemontest.RWInitiator, "", 5555)
	require.NoError(t, err, "the daemon still serves")
	require.NoError(t, ch.Close())
	require.NoError(t, e.Stop(syscall.SIGTERM))
	require.Zero(t, e.Logs.FilterMessage("CPU profile written").Len())
}

// startWithEndpoint starts the daemon with the HTTP endpoint what ("metrics", "pprof") on
// 127.0.0.1:0 (flag is its option in e.opts) and returns the endpoint's address. Listening on
// loopback, no endpoint warns; only the endpoint's own handlers answer (registerOnDefaultMux
// puts one on http.DefaultServeMux to check that).
func (e *env) startWithEndpoint(flag *string, what, path string) string {
	e.T.Helper()
	registerOnDefaultMux()
	*flag = "127.0.0.1:0"
	e.start()
	require.Zero(e.T, e.Logs.FilterMessageSnippet("endpoint is not bound to localhost").Len())
	return e.endpointAddr(what, path)
}

// endpointAddr returns the address the HTTP endpoint what ("metrics", "pprof") logged that it
// listens on, once it has checked that it logged so once, with the URL of path there.
func (e *env) endpointAddr(what, path string) string {
	e.T.Helper()
	listening := e.Logs.FilterMessage(what + " endpoint listening").All()
	require.Len(e.T, listening, 1)
	addr := listening[0].ContextMap()["address"].(string)
	require.Equal(e.T, "http://"+addr+path, listening[0].ContextMap()["url"])
	return addr
}

// stopClosesEndpoint stops the daemon and checks that the endpoint what at addr closed with
// it: logged, and refusing connections to path.
func (e *env) stopClosesEndpoint(what, addr, path string) {
	e.T.Helper()
	require.NoError(e.T, e.Stop(syscall.SIGTERM))
	require.Equal(e.T, 1, e.Count(what+" endpoint closed", "address", addr))
	_, _, err := httpGet("http://" + addr + path)
	require.ErrorIs(e.T, err, syscall.ECONNREFUSED, "the endpoint is closed with the daemon")
}

// requireAddressInUse runs the daemon with the listen address of flag taken by another
// listener (set in e.opts by setAddr) and checks that start-up fails, saying so.
func requireAddressInUse(t *testing.T, e *env, flag string, setAddr func(addr string)) {
	t.Helper()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	addr := busy.Addr().String()
	setAddr(addr)
	require.Equal(t, ExitError{1}, runServe(e.opts))
	require.Equal(t, 1, e.Count("start-up failed", "error",
		flag+" "+addr+": listen tcp "+addr+": bind: address already in use"))
}

// requireNotLoopbackWarns runs the daemon with an endpoint on every address (set in e.opts by
// setAddr) and checks that it logs warning once.
func requireNotLoopbackWarns(t *testing.T, e *env, warning string, setAddr func(addr string)) {
	t.Helper()
	setAddr(":0")
	e.start()
	require.Equal(t, 1, e.Logs.FilterMessage(warning).Len())
	require.NoError(t, e.Stop(syscall.SIGTERM))
}

// httpGet fetches url without keeping the connection (no goroutine outlives the test).
func httpGet(url string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	rsp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body)
	return rsp.StatusCode, string(body), err
}

// registerOnDefaultMux puts on http.DefaultServeMux something the pprof endpoint must not
// serve (once: -count=N runs the test again in the same process).
var registerOnDefaultMux = sync.OnceFunc(func() {
	http.HandleFunc("/srptarget-test-default-mux", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "default mux") })
})

func TestPprofEndpoint(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	addr := e.startWithEndpoint(&e.opts.PprofAddr, "pprof", "/debug/pprof/")

	for _, tt := range []struct {
		path     string
		status   int
		contains string
	}{
		{"/debug/pprof/", http.StatusOK, "goroutine"},
		{"/debug/pprof/goroutine?debug=1", http.StatusOK, "serveUntilStopped"}, // this daemon's stacks
		{"/debug/pprof/cmdline", http.StatusOK, os.Args[0]},
		{"/debug/pprof/symbol", http.StatusOK, "num_symbols"},
		{"/srptarget-test-default-mux", http.StatusNotFound, ""},
	} {
		status, body, err := httpGet("http://" + addr + tt.path)
		require.NoError(t, err, tt.path)
		require.Equal(t, tt.status, status, "%s: %s", tt.path, body)
		require.Contains(t, body, tt.contains, tt.path)
	}

	e.stopClosesEndpoint("pprof", addr, "/debug/pprof/")
}

func TestPprofAddressInUseFailsStart(t *testing.T) {
	e := newEnv(t, daemontest.E2EConfig)
	prof := filepath.Join(e.Dir, "cpu.pprof")
	e.opts.CPUProfile = prof
	requireAddressInUse(t, e, "--pprof", func(addr string) { e.opts.PprofAddr = addr })
	require.Equal(t, 1, e.Count("srptarget did not start", "errors", 1))
	_, err := os.Stat(filepath.Join(e.Dir, "lun1.img"))
	require.ErrorIs(t, err, os.ErrNotExist, "the daemon did not start")
	// The profile started before the endpoint failed is written all the same.
	readProfile(t, prof)
}

// pprofNotLoopback is the warning of a pprof endpoint that others than local users reach.
const pprofNotLoopback = "the pprof endpoint is not bound to localhost: whoever reaches it reads the daemon's command line, stacks and memory"

func TestPprofNotOnLoopbackWarns(t *testing.T) {
	for _, tt := range []struct {
		addr     string
		loopback bool
	}{
		{"127.0.0.1:6060", true},
		{"127.1.2.3:6060", true},
		{"[::1]:6060", true},
		{"localhost:6060", true},
		{":6060", false},
		{"0.0.0.0:6060", false},
		{"[::]:6060", false},
		{"192.0.2.1:6060", false},
		{"pprof.example:6060", false},
		{"no-port", false},
	} {
		require.Equal(t, tt.loopback, isLoopback(tt.addr), tt.addr)
	}

	e := newEnv(t, daemontest.E2EConfig)
	requireNotLoopbackWarns(t, e, pprofNotLoopback, func(addr string) { e.opts.PprofAddr = addr })
}

// TestCPUProfileDoesNotFollowPlantedLink: FILE.tmp planted as a link to another file (as a
// local user could in /tmp) is replaced, never written through, whether the profile starts at
// start-up or waits for SIGUSR1.
func TestCPUProfileDoesNotFollowPlantedLink(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			e := newEnv(t, daemontest.E2EConfig)
			victim := filepath.Join(e.Dir, "victim")
			require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o600))
			prof := filepath.Join(e.Dir, "cpu.pprof")
			require.NoError(t, os.Symlink(victim, prof+".tmp"))
			e.opts.CPUProfile = prof
			e.opts.CPUProfileWait = wait
			handled := make(chan struct{}, 1)
			e.opts.afterProfileSignal = func() { handled <- struct{}{} }
			e.start()
			if wait {
				_, err := os.Lstat(prof + ".tmp")
				require.ErrorIs(t, err, os.ErrNotExist, "the writability check removed the link and left nothing")
				require.NoError(t, os.Symlink(victim, prof+".tmp"))
				e.profileSignal(syscall.SIGUSR1, handled)
			}
			fi, err := os.Lstat(prof + ".tmp")
			require.NoError(t, err)
			require.True(t, fi.Mode().IsRegular(), "FILE.tmp is the daemon's own file, mode %v", fi.Mode())
			profiledWindowA(t)
			require.NoError(t, e.Stop(syscall.SIGTERM))
			readProfile(t, prof)
			data, err := os.ReadFile(victim)
			require.NoError(t, err)
			require.Equal(t, "precious", string(data))
		})
	}
}
