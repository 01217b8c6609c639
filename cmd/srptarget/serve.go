package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
)

// serveOptions are the daemon's options plus how it meets the process: the signals it gets
// and how it exits at once on a second one. Tests feed signals through a channel.
type serveOptions struct {
	daemonOptions
	processOptions
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

// processOptions are the serve flags about the process around the daemon rather than the
// target it serves: how long it drains, profiling, the control socket, metrics. They go from
// the command line (serveFlags) to runServe (serveOptions) as they are, so they are declared
// once, here.
type processOptions struct {
	shutdownTimeout time.Duration
	// cpuProfile is the file of --cpuprofile ("" for none); cpuProfileWait leaves the profile
	// to SIGUSR1 instead of starting it at start-up. pprofAddr is the listen address of
	// --pprof ("" for none).
	cpuProfile     string
	cpuProfileWait bool
	pprofAddr      string
	// controlPath is the control socket ("" for none), controlGroup its group ("" to keep
	// the daemon's).
	controlPath  string
	controlGroup string
	// controlReadGroup is the group whose members may use the control commands that only
	// read ("" for none).
	controlReadGroup string
	// metricsAddr is the listen address of --metrics ("" for none).
	metricsAddr string
}

// exitCodeError makes main exit with code without printing anything more: what went wrong
// was already logged or printed.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return "exit status " + strconv.Itoa(e.code) }

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
	if opts.shutdownTimeout <= 0 {
		opts.shutdownTimeout = DefaultShutdownTimeout
	}
	var prof *cpuProfiler
	if opts.cpuProfile != "" {
		var err error
		if prof, err = newCPUProfiler(opts.cpuProfile, opts.cpuProfileWait, log); err != nil {
			return startFailed(log, err)
		}
	}
	var pp *pprofServer
	var ms *metricsServer
	err := func() error {
		if opts.pprofAddr != "" {
			var err error
			if pp, err = startPprof(opts.pprofAddr, pprofLimits, log); err != nil {
				return startFailed(log, err)
			}
		}
		if opts.metricsAddr != "" {
			var err error
			if ms, err = startMetrics(opts.metricsAddr, metricsLimits, log); err != nil {
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
	return exitCodeError{1}
}

// serveUntilStopped is runServe without the profiling around it.
func serveUntilStopped(opts serveOptions, prof *cpuProfiler) error {
	log := opts.log
	// The control socket is made first: a second daemon on the same socket stops here, before
	// it opens (and claims) any backstore. It answers while the daemon waits for a device.
	var ctl *controlServer
	if opts.controlPath != "" {
		policy, err := newControlPolicy(opts.controlGroup, opts.controlReadGroup)
		if err != nil {
			return startFailed(log, err)
		}
		ctlLn, err := listenControl(opts.controlPath, opts.controlGroup, opts.controlReadGroup != "", log)
		if err != nil {
			return startFailed(log, err)
		}
		ctl = serveControl(ctlLn, opts.controlPath, policy, opts.daemonOptions)
		opts.retry = ctl.retry
		log.Info("control socket: srptarget status, sessions, luns, stats, reload, acl-check",
			zap.String("path", opts.controlPath), zap.String("group", opts.controlGroup), zap.String("read_group", opts.controlReadGroup))
	}
	d, startErr := startWhenDevice(opts, prof)
	if startErr != nil || d == nil {
		if ctl != nil {
			ctl.close()
		}
		return startErr
	}
	if ctl != nil {
		ctl.setDaemon(d)
	}
	log.Info("srptarget ready: SIGHUP reloads the configuration, SIGTERM or SIGINT stops", zap.Int("pid", os.Getpid()))
	// The LUNs are open and the listeners that can listen do, with their buffer pools:
	// systemd (Type=notify) may start what is ordered after. STATUS= names the listeners that
	// wait for their device.
	notify(log, sddaemon.SdNotifyReady, "STATUS="+d.statusLine())
	if opts.ready != nil {
		opts.ready(d)
	}
	poll := opts.devicePoll
	if poll <= 0 {
		poll = DefaultDevicePoll
	}
	pendingTicker := time.NewTicker(poll)
	defer pendingTicker.Stop()
	lastHost := hostState(opts.daemonOptions)
	profileSignal := func(sig os.Signal) {
		handleProfileSignal(log, prof, sig)
		if opts.afterProfileSignal != nil {
			opts.afterProfileSignal()
		}
	}
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
	notify(log, sddaemon.SdNotifyStopping, "STATUS=shutting down")
	log.Info("shutting down: logging every channel out and finishing outstanding commands; a second signal exits at once",
		zap.Stringer("signal", stopSig), zap.Duration("timeout", opts.shutdownTimeout))
	if ctl != nil {
		// No more requests: the socket file is removed now, so that a client finds no
		// daemon rather than one that hangs in its shutdown.
		ctl.close()
	}
	done := make(chan struct{})
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
	if opts.beforeShutdown != nil {
		opts.beforeShutdown()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.shutdownTimeout)
	err := d.shutdown(ctx)
	cancel()
	close(done)
	<-watcher
	if err != nil {
		log.Error("shutdown incomplete", zap.Error(err))
		return exitCodeError{1}
	}
	return nil
}

// logConfigErrors logs each configuration error on its own line.
func logConfigErrors(log *zap.Logger, err error) {
	var errs config.Errors
	var one *config.Error
	switch {
	case errors.As(err, &errs):
		for _, e := range errs {
			log.Error("configuration error", zap.String("error", e.Error()), zap.String("file", e.File), zap.Int("line", e.Line))
		}
	case errors.As(err, &one):
		log.Error("configuration error", zap.String("error", one.Error()), zap.String("file", one.File), zap.Int("line", one.Line))
	default:
		log.Error("start-up failed", zap.Error(err))
	}
}

func countErrors(err error) int {
	var errs config.Errors
	if errors.As(err, &errs) {
		return len(errs)
	}
	return 1
}

// DefaultConfigFile is the configuration that serve, validate and login-line read without
// --config: where `make install` puts the example (as srptarget.yaml.example) and where the
// systemd unit points.
const DefaultConfigFile = "/etc/srptarget/srptarget.yaml"

// serveFlags are the command line of `srptarget serve`.
type serveFlags struct {
	configFile string
	logFormat  string
	logLevel   string
	processOptions
}

// check refuses flag combinations that would silently do nothing.
func (f serveFlags) check() error {
	if f.cpuProfileWait && f.cpuProfile == "" {
		return errors.New("--cpuprofile-wait needs --cpuprofile FILE")
	}
	return nil
}

func newServeCommand() *cobra.Command { return newServeCommandWith(runServeCommand) }

// runServeCommand runs the daemon on the host's RDMA devices, logging to stderr.
func runServeCommand(f serveFlags) error {
	reexecErr := reexecWithSysmonAwake() // returns only if it did not execute
	log, level, err := newLoggerLevel(os.Stderr, f.logFormat, f.logLevel)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = log.Sync() }()
	if reexecErr != nil {
		log.Warn("could not execute the daemon again with Go's sysmon kept awake: it runs, with more system calls and context switches per wake-up",
			zap.Error(reexecErr), zap.String("hint", "GODEBUG="+sysmonAwake+" in its environment does the same"))
	}
	sigs := make(chan os.Signal, 4)
	// SIGUSR1 and SIGUSR2 are caught even without --cpuprofile: their default action would
	// kill the daemon, and its initiators' disks with it.
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	log.Info("srptarget starting", zap.String("version", version), zap.String("commit", build.Commit),
		zap.Bool("modified", build.Modified), zap.Strings("backstores", build.Backstores),
		zap.String("config", f.configFile), zap.String("godebug", os.Getenv("GODEBUG")))
	return runServe(serveOptions{
		daemonOptions: daemonOptions{
			configFile: f.configFile,
			log:        log,
			listen:     rdmaListen(log),
			listenIB:   rdmaListenIB(log),
			devices:    rdmaDevices,
			interfaces: hostAddrs,
			memlock:    ensureMemlock,
			sched:      setScheduling,
			level:      &level,
		},
		processOptions: f.processOptions,
		signals:        sigs,
		exit:           os.Exit,
	})
}

// newServeCommandWith builds the serve command around run (tests check what it gets).
func newServeCommandWith(run func(serveFlags) error) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the SRP target",
		Long: `Run the SRP target described by the configuration file.

SIGHUP reloads the configuration: it takes effect entirely or, on any error, not at all.
SIGTERM or SIGINT log every initiator out, finish outstanding commands, flush every
backstore and exit 0; a second signal exits at once.

The control socket (--control, a Unix socket with mode 0660) answers srptarget status,
sessions, luns, stats, reload and acl-check: for root, the daemon's user and the members of
--control-group every command, for the members of --control-read-group those that only read
(not reload), for anyone else none, as the kernel gives each client's credentials.

Without --config it reads /etc/srptarget/srptarget.yaml. When the host has no RDMA
device yet, or none with a listener's address (the adapter's driver or rdma_rxe loads
after srptarget at boot), it checks the configuration, logs that it waits and starts
listening when the device appears (checked every second); SIGTERM stops it meanwhile, and
srptarget status says that it waits. Under systemd (Type=notify, configs/srptarget.service)
it reports READY=1 once it listens (or waits), RELOADING=1 and READY=1 around a reload and
STOPPING=1 (sd_notify(3)).

Profiling: --cpuprofile FILE profiles the daemon's CPU use (runtime/pprof, 100 Hz) from
start-up, or with --cpuprofile-wait from the first SIGUSR1, and writes FILE on SIGUSR2
and at exit (a second SIGTERM and a failed start included). SIGUSR1 starts a new profile,
discarding one that runs; SIGUSR2 writes FILE (FILE.tmp until complete, then renamed) and
profiles nothing until the next SIGUSR1. So "kill -USR1" and "kill -USR2" around a load
profile exactly that load. --pprof ADDR serves net/http/pprof at http://ADDR/debug/pprof/;
only one CPU profile runs at a time, so /debug/pprof/profile fails while --cpuprofile
profiles.

Metrics: --metrics ADDR serves Prometheus metrics at http://ADDR/metrics: per LUN
commands, bytes, errors by sense key, latency histograms and commands in flight; per
target logins, sessions, channels, buffer pool use, BUSY answers, task management and
RDMA errors (docs/metrics.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return usageError{err}
			}
			return run(f)
		},
	}
	cmd.Flags().StringVar(&f.configFile, "config", DefaultConfigFile, "configuration file (YAML, see configs/README.md)")
	configFileFlag(cmd)
	cmd.Flags().StringVar(&f.logFormat, "log-format", logAuto,
		"log format: console, json, journal (no time or level; each line's priority as a <N> prefix), or auto: journal when stderr is the journal, console otherwise")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "log level: "+orList(logLevels))
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(logFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().DurationVar(&f.shutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long SIGTERM waits for outstanding commands")
	cmd.Flags().StringVar(&f.cpuProfile, "cpuprofile", "",
		"write a CPU profile (go tool pprof) to `FILE`: from start-up until exit, or from SIGUSR1 (which restarts it) until SIGUSR2 or exit")
	cmd.Flags().BoolVar(&f.cpuProfileWait, "cpuprofile-wait", false,
		"with --cpuprofile: profile nothing from start-up; the first SIGUSR1 starts the profile")
	cmd.Flags().StringVar(&f.pprofAddr, "pprof", "",
		"serve net/http/pprof at http://`ADDR`/debug/pprof/ (e.g. 127.0.0.1:6060; off by default). Bind it to localhost: "+
			"whoever reaches it reads the daemon's command line, stacks and memory")
	cmd.Flags().StringVar(&f.controlPath, "control", DefaultControlSocket,
		"the control socket (Unix, mode 0660) for srptarget status, sessions, luns, stats, reload and acl-check; \"\" for none")
	cmd.Flags().StringVar(&f.controlGroup, "control-group", "",
		"the group (name or number) that owns the control socket: its members may use the commands, reload included")
	cmd.Flags().StringVar(&f.controlReadGroup, "control-read-group", "",
		"a group (name or number) whose members may use the control commands that only read: status, sessions, luns, stats "+
			"and acl-check, not reload; with it the socket is mode 0666 and each client's credentials decide (SO_PEERCRED)")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics", "",
		"serve Prometheus metrics at http://`ADDR`/metrics (e.g. 127.0.0.1:9464; off by default; docs/metrics.md). Bind it to localhost "+
			"or a management network: whoever reaches it sees the LUNs, their load and the sessions")
	return cmd
}
