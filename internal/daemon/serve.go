package daemon

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
)

// serveOptions are the daemon's options plus how it meets the process: the signals it gets
// and how it exits at once on a second one. Tests feed signals through a channel.
type serveOptions struct {
	daemonOptions
	Process
	signals <-chan os.Signal
	exit    func(code int)

	// retry, from the control server, asks a serve that waits for a device to try to start
	// (a reload on the control socket found the configuration valid); nil without one.
	retry <-chan struct{}

	// devicePoll is how often the daemon looks for an RDMA device while it waits for one
	// (DefaultDevicePoll when 0; tests make it short).
	devicePoll time.Duration

	// Test hooks: ready is called once the daemon serves, afterReload with the result of each
	// SIGHUP reload, afterProfileSignal once a SIGUSR1 or SIGUSR2 is handled, beforeShutdown
	// once the first SIGTERM/SIGINT is handled (and the watcher for a second one runs) but
	// before the target shuts down.
	ready              func(*daemon)
	afterReload        func(error)
	afterProfileSignal func()
	beforeShutdown     func()
}

// Process are the serve flags about the process around the daemon rather than the
// target it serves: how long it drains, profiling, the control socket, metrics. They go from
// the command line (Flags) to runServe (serveOptions) as they are, so they are declared
// once, here.
type Process struct {
	ShutdownTimeout time.Duration
	// CPUProfile is the file of --cpuprofile ("" for none); CPUProfileWait leaves the profile
	// to SIGUSR1 instead of starting it at start-up. PprofAddr is the listen address of
	// --pprof ("" for none).
	CPUProfile     string
	CPUProfileWait bool
	PprofAddr      string
	// ControlPath is the control socket ("" for none), ControlGroup its group ("" to keep
	// the daemon's).
	ControlPath  string
	ControlGroup string
	// ControlReadGroup is the group whose members may use the control commands that only
	// read ("" for none).
	ControlReadGroup string
	// MetricsAddr is the listen address of --metrics ("" for none).
	MetricsAddr string
}

// ExitError makes main exit with Code without printing anything more: what went wrong was
// already logged or printed.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// signalExitCode is the shell's convention for a process ended by a signal: 128 + its number.
func signalExitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// runServe starts the daemon and handles signals until it has shut down: SIGHUP reloads the
// configuration, SIGTERM or SIGINT shut down gracefully, and another SIGTERM or SIGINT during
// the shutdown exits at once; SIGUSR1 and SIGUSR2 start and write the CPU profile. It returns
// nil after a clean shutdown (exit status 0).
//
// The CPU profile and the pprof endpoint start before the daemon, so that they see its
// start-up, and stop after it, so that they see its shutdown; the profile is written
// whichever way runServe returns, a failed start included.
func runServe(opts serveOptions) error {
	log := opts.log
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	var prof *cpuProfiler
	if opts.CPUProfile != "" {
		var err error
		if prof, err = newCPUProfiler(opts.CPUProfile, opts.CPUProfileWait, log); err != nil {
			return startFailed(log, err)
		}
	}
	var pp *pprofServer
	var ms *metricsServer
	err := func() error {
		if opts.PprofAddr != "" {
			var err error
			if pp, err = startPprof(opts.PprofAddr, pprofLimits, log); err != nil {
				return startFailed(log, err)
			}
		}
		if opts.MetricsAddr != "" {
			var err error
			if ms, err = startMetrics(opts.MetricsAddr, metricsLimits, opts.build, log); err != nil {
				return startFailed(log, err)
			}
			opts.metrics = ms.collector
		}
		return serveUntilStopped(opts, prof)
	}()
	if ms != nil {
		ms.close(log)
	}
	if pp != nil {
		pp.close(log)
	}
	if prof != nil {
		if _, perr := prof.write("exit"); perr != nil {
			log.Error("CPU profile lost", zap.Error(perr))
		}
	}
	if err == nil {
		log.Info("stopped")
	}
	return err
}

// startFailed logs err, the one reason the daemon did not start, and returns the error that
// makes main exit with status 1.
func startFailed(log *zap.Logger, err error) error {
	log.Error("start-up failed", zap.Error(err))
	log.Error("srptarget did not start", zap.Int("errors", 1))
	return ExitError{1}
}

// serveUntilStopped is runServe without the profiling around it.
func serveUntilStopped(opts serveOptions, prof *cpuProfiler) error {
	log := opts.log
	ctl, answers, err := startControl(&opts)
	if err != nil {
		return startFailed(log, err)
	}
	d, startErr := startWhenDevice(opts, prof)
	if startErr != nil || d == nil {
		if ctl != nil {
			ctl.Close()
		}
		return startErr
	}
	if answers != nil {
		answers.daemon.Store(d)
	}
	log.Info("srptarget ready: SIGHUP reloads the configuration, SIGTERM or SIGINT stops", zap.Int("pid", os.Getpid()))
	// The LUNs are open and the listeners that can listen do, with their buffer pools:
	// systemd (Type=notify) may start what is ordered after. STATUS= names the listeners that
	// wait for their device.
	notify(log, sddaemon.SdNotifyReady, "STATUS="+d.statusLine())
	if opts.ready != nil {
		opts.ready(d)
	}
	profileSignal := func(sig os.Signal) {
		handleProfileSignal(log, prof, sig)
		if opts.afterProfileSignal != nil {
			opts.afterProfileSignal()
		}
	}
	stopSig := serveSignals(opts, d, profileSignal)
	notify(log, sddaemon.SdNotifyStopping, "STATUS=shutting down")
	log.Info("shutting down: logging every channel out and finishing outstanding commands; a second signal exits at once",
		zap.Stringer("signal", stopSig), zap.Duration("timeout", opts.ShutdownTimeout))
	if ctl != nil {
		// No more requests: the socket file is removed now, so that a client finds no
		// daemon rather than one that hangs in its shutdown.
		ctl.Close()
	}
	done := make(chan struct{})
	watcher := watchSecondSignal(opts, prof, profileSignal, done)
	if opts.beforeShutdown != nil {
		opts.beforeShutdown()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	err = d.shutdown(ctx)
	cancel()
	close(done)
	<-watcher
	if err != nil {
		log.Error("shutdown incomplete", zap.Error(err))
		return ExitError{1}
	}
	return nil
}

// startControl makes the control socket (when opts has one) and serves it with the answers
// of a daemon not started yet; a reload on it while the daemon waits for a device asks it to
// try now (opts.retry). The control socket is made first: a second daemon on the same socket
// stops here, before it opens (and claims) any backstore.
func startControl(opts *serveOptions) (*control.Server, *controlAnswers, error) {
	if opts.ControlPath == "" {
		return nil, nil, nil
	}
	log := opts.log
	policy, err := control.NewPolicy(opts.ControlGroup, opts.ControlReadGroup)
	if err != nil {
		return nil, nil, err
	}
	ln, err := control.Listen(opts.ControlPath, opts.ControlGroup, opts.ControlReadGroup != "", log)
	if err != nil {
		return nil, nil, err
	}
	answers := newControlAnswers(opts.daemonOptions)
	ctl := control.Serve(ln, opts.ControlPath, policy, answers, log)
	opts.retry = answers.retry
	log.Info("control socket: srptarget status, sessions, luns, stats, reload, acl-check",
		zap.String("path", opts.ControlPath), zap.String("group", opts.ControlGroup), zap.String("read_group", opts.ControlReadGroup))
	return ctl, answers, nil
}

// serveSignals handles the signals while d serves, until SIGTERM or SIGINT (or the end of
// the signals), which it returns: SIGHUP reloads, SIGUSR1 and SIGUSR2 profile. It also lets
// the listeners that wait for their address listen once the host changes. A reload still
// running when it returns has given up or finished.
func serveSignals(opts serveOptions, d *daemon, profileSignal func(os.Signal)) os.Signal {
	log := opts.log
	poll := opts.devicePoll
	if poll <= 0 {
		poll = DefaultDevicePoll
	}
	pendingTicker := time.NewTicker(poll)
	defer pendingTicker.Stop()
	lastHost := hostState(opts.daemonOptions)
	// A SIGHUP reload runs on a goroutine of its own (reloading is its result), so that the
	// signals that come meanwhile are seen: a reload may wait for a backstore that does not
	// answer (prepare), and a SIGTERM must not wait for it. Another SIGHUP meanwhile is taken
	// once the reload is done (hupAgain).
	var reloading chan error
	hupAgain := false
	stopReload := make(chan struct{})
	startReload := func() {
		notifyReloading(log)
		reloading = make(chan error, 1)
		go func() { reloading <- d.reloadStop(stopReload) }()
	}
	var stopSig os.Signal
	for stopSig == nil {
		var sig os.Signal
		var ok bool
		select {
		case sig, ok = <-opts.signals:
		case err := <-reloading:
			reloading = nil
			notifyReloaded(log, err, d.statusLine())
			if opts.afterReload != nil {
				opts.afterReload(err)
			}
			if hupAgain {
				hupAgain = false
				startReload()
			}
			continue
		case <-pendingTicker.C:
			// A listener that waits for its address listens once the devices or the
			// host's addresses change (each attempt binds and may register a pool).
			if len(d.pendingAddrs()) == 0 {
				continue
			}
			if h := hostState(opts.daemonOptions); h != lastHost {
				lastHost = h
				if d.retryPending() {
					notify(log, "STATUS="+d.statusLine())
				}
			}
			continue
		}
		if !ok {
			stopSig = syscall.SIGTERM
			break
		}
		switch sig {
		case syscall.SIGHUP:
			if reloading != nil {
				hupAgain = true
				continue
			}
			startReload()
		case syscall.SIGTERM, os.Interrupt:
			stopSig = sig
		case syscall.SIGUSR1, syscall.SIGUSR2:
			profileSignal(sig)
		default:
			log.Debug("ignoring signal", zap.Stringer("signal", sig))
		}
	}
	close(stopReload) // a reload still opening backstores gives up; one under way finishes
	if reloading != nil {
		<-reloading
	}
	return stopSig
}

// watchSecondSignal watches the signals during the shutdown, until done closes: another
// SIGTERM or SIGINT exits at once (opts.exit), with the CPU profile written; SIGUSR1 and
// SIGUSR2 still profile. The channel it returns closes when it has stopped.
func watchSecondSignal(opts serveOptions, prof *cpuProfiler, profileSignal func(os.Signal), done <-chan struct{}) <-chan struct{} {
	log := opts.log
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		for {
			select {
			case <-done:
				return
			case sig, ok := <-opts.signals:
				if !ok {
					<-done
					return
				}
				switch {
				case sig == syscall.SIGTERM || sig == os.Interrupt:
					log.Error("second signal: exiting at once without finishing the shutdown", zap.Stringer("signal", sig))
					// The profile of a shutdown that hangs is the one worth having.
					if prof != nil {
						if _, err := prof.write("second signal"); err != nil {
							log.Error("CPU profile lost", zap.Error(err))
						}
					}
					_ = log.Sync()
					opts.exit(signalExitCode(sig))
					return
				case isProfileSignal(sig):
					profileSignal(sig)
				default:
					log.Info("ignoring signal during shutdown", zap.Stringer("signal", sig))
				}
			}
		}
	}()
	return watcher
}

// logConfigErrors logs each configuration error on its own line.
func logConfigErrors(log *zap.Logger, err error) {
	errs := config.AsErrors(err)
	if errs == nil {
		log.Error("start-up failed", zap.Error(err))
	}
	for _, e := range errs {
		log.Error("configuration error", zap.String("error", e.Error()), zap.String("file", e.File), zap.Int("line", e.Line))
	}
}

func countErrors(err error) int {
	if errs := config.AsErrors(err); errs != nil {
		return len(errs)
	}
	return 1
}

// Flags are the command line of `srptarget serve`, the logging flags aside.
type Flags struct {
	ConfigFile string
	Process
}

// Options run the daemon on other seams than the host's RDMA devices and signals: the
// in-memory fabric and a channel of signals in tests.
type Options struct {
	Flags
	Log   *zap.Logger
	Level *zap.AtomicLevel // nil: the level cannot be changed (srptarget log-level)
	Build control.BuildInfo

	Listen     ListenFunc
	ListenIB   ListenIBFunc
	Devices    DevicesFunc
	Interfaces InterfacesFunc

	// Signals are the process's signals (SIGHUP, SIGTERM...); Exit exits at once (a second
	// SIGTERM).
	Signals <-chan os.Signal
	Exit    func(code int)
	// DevicePoll is how often a daemon waiting for an RDMA device looks for one
	// (DefaultDevicePoll when 0).
	DevicePoll time.Duration
	// Ready is called once the daemon serves; AfterReload with the outcome of each SIGHUP.
	Ready       func()
	AfterReload func(error)
}

// Serve runs the daemon until a signal stops it, as Run does on the host.
func Serve(o Options) error {
	opts := serveOptions{
		daemonOptions: daemonOptions{
			configFile: o.ConfigFile,
			log:        o.Log,
			listen:     o.Listen,
			listenIB:   o.ListenIB,
			devices:    o.Devices,
			interfaces: o.Interfaces,
			level:      o.Level,
			build:      o.Build,
		},
		Process:     o.Process,
		signals:     o.Signals,
		exit:        o.Exit,
		devicePoll:  o.DevicePoll,
		afterReload: o.AfterReload,
	}
	if o.Ready != nil {
		opts.ready = func(*daemon) { o.Ready() }
	}
	return runServe(opts)
}

// Run runs the daemon on the host's RDMA devices, logging to log (at level, which
// srptarget log-level changes), as the binary build.
func Run(f Flags, log *zap.Logger, level *zap.AtomicLevel, build control.BuildInfo) error {
	reexecErr := reexecWithSysmonAwake() // returns only if it did not execute
	if reexecErr != nil {
		log.Warn("could not execute the daemon again with Go's sysmon kept awake: it runs, with more system calls and context switches per wake-up",
			zap.Error(reexecErr), zap.String("hint", "GODEBUG="+sysmonAwake+" in its environment does the same"))
	}
	sigs := make(chan os.Signal, 4)
	// SIGUSR1 and SIGUSR2 are caught even without --cpuprofile: their default action would
	// kill the daemon, and its initiators' disks with it.
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	log.Info("srptarget starting", zap.String("version", build.Version), zap.String("commit", build.Commit),
		zap.Bool("modified", build.Modified), zap.Strings("backstores", build.Backstores),
		zap.String("config", f.ConfigFile), zap.String("godebug", os.Getenv("GODEBUG")))
	return runServe(serveOptions{
		daemonOptions: daemonOptions{
			configFile: f.ConfigFile,
			log:        log,
			listen:     rdmaListen(log),
			listenIB:   rdmaListenIB(log),
			devices:    RDMADevices,
			interfaces: HostAddrs,
			memlock:    ensureMemlock,
			sched:      setScheduling,
			level:      level,
			build:      build,
		},
		Process: f.Process,
		signals: sigs,
		exit:    os.Exit,
	})
}
