package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"os"
	rpprof "runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/srptarget/srptarget/internal/accept"
	"go.uber.org/zap"
)

// cpuProfiler is the CPU profile of `serve --cpuprofile FILE`. A profile runs from start-up
// (unless --cpuprofile-wait) or from SIGUSR1, and is written on SIGUSR2 or when the daemon
// exits. SIGUSR1 while a profile runs starts it again, so that any window of a long run can
// be profiled: the benchmark profiles the srptarget blocks of one round, not the prefill
// nor the rounds it measures unprofiled (the profiler's 100 Hz signals cost CPU).
//
// The profile is collected in FILE.tmp and renamed to FILE when complete, so that a script
// that waits for FILE never reads half a profile; each write replaces FILE. Neither name is
// followed if it is a symbolic link: FILE.tmp is created exclusively (createTmp), and
// rename(2) replaces a link at FILE rather than writing through it.
type cpuProfiler struct {
	path string
	log  *zap.Logger

	mu    sync.Mutex // serialises the signal handlers of the serve loop and of the shutdown watcher
	f     *os.File   // FILE.tmp while a profile runs, nil otherwise
	start time.Time
}

// newCPUProfiler checks that FILE can be written, so that a typo fails the start and not the
// first SIGUSR2 an hour later, and starts a profile unless wait is set.
func newCPUProfiler(path string, wait bool, log *zap.Logger) (*cpuProfiler, error) {
	p := &cpuProfiler{path: path, log: log}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("--cpuprofile %s: is a directory", path)
	}
	if wait {
		f, err := p.createTmp()
		if err != nil {
			return nil, err
		}
		_ = f.Close()
		_ = os.Remove(p.tmp())
		log.Info("CPU profile: waiting for SIGUSR1 to start one, SIGUSR2 writes it", zap.String("path", path))
		return p, nil
	}
	if err := p.begin("start-up"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *cpuProfiler) tmp() string { return p.path + ".tmp" }

// createTmp makes FILE.tmp afresh, with O_CREAT|O_EXCL|O_NOFOLLOW. The daemon often runs as
// root with FILE in /tmp, where another user could plant FILE.tmp as a symbolic link to a
// file of root's that a plain create would truncate and overwrite with the profile; with
// O_EXCL the open fails on any existing name and never follows a link (open(2)). Whatever is
// there (a profile of an earlier run that never got renamed, or such a link) is removed
// first: unlink(2) removes the link itself, not what it points to.
func (p *cpuProfiler) createTmp() (*os.File, error) {
	tmp := p.tmp()
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--cpuprofile %s: removing the old %s: %w", p.path, tmp, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile %s: %w", p.path, err)
	}
	return f, nil
}

// begin starts a profile; one already running is discarded.
func (p *cpuProfiler) begin(trigger string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		rpprof.StopCPUProfile()
		_ = p.f.Close()
		p.f = nil
		p.log.Info("CPU profile discarded: a new one starts", zap.String("path", p.path),
			zap.Duration("discarded", time.Since(p.start).Round(time.Millisecond)))
	}
	f, err := p.createTmp()
	if err != nil {
		return err
	}
	if err := rpprof.StartCPUProfile(f); err != nil {
		// Another CPU profile runs: /debug/pprof/profile of --pprof, or go test -cpuprofile.
		_ = f.Close()
		_ = os.Remove(p.tmp())
		return fmt.Errorf("--cpuprofile %s: %w", p.path, err)
	}
	p.f, p.start = f, time.Now()
	p.log.Info("CPU profile started", zap.String("path", p.path), zap.String("trigger", trigger))
	return nil
}

// write stops the running profile and writes FILE. It reports whether a profile ran.
func (p *cpuProfiler) write(trigger string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return false, nil
	}
	rpprof.StopCPUProfile() // returns once the profile is complete in f
	took := time.Since(p.start)
	f := p.f
	p.f = nil
	var size int64
	fi, err := f.Stat()
	if err == nil {
		size = fi.Size()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.tmp(), p.path)
	}
	if err != nil {
		_ = os.Remove(p.tmp())
		return true, fmt.Errorf("writing the CPU profile %s: %w", p.path, err)
	}
	p.log.Info("CPU profile written", zap.String("path", p.path), zap.Duration("duration", took.Round(time.Millisecond)),
		zap.Int64("bytes", size), zap.String("trigger", trigger))
	return true, nil
}

// handleProfileSignal acts on SIGUSR1 (start a profile) and SIGUSR2 (write it). p is nil
// without --cpuprofile.
func handleProfileSignal(log *zap.Logger, p *cpuProfiler, sig os.Signal) {
	if p == nil {
		log.Warn("ignoring signal: SIGUSR1 and SIGUSR2 start and write the CPU profile of --cpuprofile, which is not set",
			zap.Stringer("signal", sig))
		return
	}
	switch sig {
	case syscall.SIGUSR1:
		if err := p.begin("SIGUSR1"); err != nil {
			log.Error("CPU profile not started", zap.Error(err))
		}
	case syscall.SIGUSR2:
		ran, err := p.write("SIGUSR2")
		switch {
		case err != nil:
			log.Error("CPU profile lost", zap.Error(err))
		case !ran:
			log.Warn("SIGUSR2: no CPU profile runs, nothing written (SIGUSR1 starts one)", zap.String("path", p.path))
		}
	}
}

// isProfileSignal tells the signals handleProfileSignal takes.
func isProfileSignal(sig os.Signal) bool { return sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 }

// pprofServer is the HTTP endpoint of `serve --pprof ADDR`: net/http/pprof's handlers on a
// ServeMux of its own, so that nothing else registered on http.DefaultServeMux (importing
// net/http/pprof registers there too) is ever served.
type pprofServer struct{ *httpEndpoint }

// pprofLimits are the bounds of the pprof endpoint. /debug/pprof/profile and trace run for
// the seconds asked, and net/http/pprof refuses more than the write timeout allows: ten
// minutes (--cpuprofile profiles longer windows). A debugging tool needs few connections.
var pprofLimits = endpointLimits(10*time.Minute, 8)

// startPprof listens on addr and serves /debug/pprof/ until close. Anyone who reaches the
// port reads the daemon's command line, stacks and memory profile, hence the warning unless
// addr is a loopback address.
func startPprof(addr string, lim accept.HTTPLimits, log *zap.Logger) (*pprofServer, error) {
	plog := log.Named("pprof")
	ln, err := lim.Listen(addr, "pprof", plog)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also heap, goroutine, block, mutex, allocs, threadcreate
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	e := serveEndpoint("pprof", addr, "/debug/pprof/",
		"the pprof endpoint is not bound to localhost: whoever reaches it reads the daemon's command line, stacks and memory",
		ln, mux, lim, log)
	return &pprofServer{e}, nil
}
