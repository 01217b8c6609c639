package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
)

// serveFlags are the command line of `srptarget serve`.
type serveFlags struct {
	daemon.Flags
	logFormat string
	logLevel  string
}

// check refuses flag combinations that would silently do nothing.
func (f serveFlags) check() error {
	if f.CPUProfileWait && f.CPUProfile == "" {
		return errors.New("--cpuprofile-wait needs --cpuprofile FILE")
	}
	return nil
}

func newServeCommand() *cobra.Command { return newServeCommandWith(runServeCommand) }

// runServeCommand runs the daemon on the host's RDMA devices, logging to stderr.
func runServeCommand(f serveFlags) error {
	log, level, err := newLoggerLevel(os.Stderr, f.logFormat, f.logLevel)
	if err != nil {
		return usageError{err}
	}
	defer func() { _ = log.Sync() }()
	return daemon.Run(f.Flags, log, &level, build)
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
	cmd.Flags().StringVar(&f.ConfigFile, "config", DefaultConfigFile, "configuration file (YAML, see configs/README.md)")
	configFileFlag(cmd)
	cmd.Flags().StringVar(&f.logFormat, "log-format", logAuto,
		"log format: console, json, journal (no time or level; each line's priority as a <N> prefix), or auto: journal when stderr is the journal, console otherwise")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "info", "log level: "+orList(logLevels))
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(logFormats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().DurationVar(&f.ShutdownTimeout, "shutdown-timeout", daemon.DefaultShutdownTimeout, "how long SIGTERM waits for outstanding commands")
	cmd.Flags().StringVar(&f.CPUProfile, "cpuprofile", "",
		"write a CPU profile (go tool pprof) to `FILE`: from start-up until exit, or from SIGUSR1 (which restarts it) until SIGUSR2 or exit")
	cmd.Flags().BoolVar(&f.CPUProfileWait, "cpuprofile-wait", false,
		"with --cpuprofile: profile nothing from start-up; the first SIGUSR1 starts the profile")
	cmd.Flags().StringVar(&f.PprofAddr, "pprof", "",
		"serve net/http/pprof at http://`ADDR`/debug/pprof/ (e.g. 127.0.0.1:6060; off by default). Bind it to localhost: "+
			"whoever reaches it reads the daemon's command line, stacks and memory")
	cmd.Flags().StringVar(&f.ControlPath, "control", control.DefaultSocket,
		"the control socket (Unix, mode 0660) for srptarget status, sessions, luns, stats, reload and acl-check; \"\" for none")
	cmd.Flags().StringVar(&f.ControlGroup, "control-group", "",
		"the group (name or number) that owns the control socket: its members may use the commands, reload included")
	cmd.Flags().StringVar(&f.ControlReadGroup, "control-read-group", "",
		"a group (name or number) whose members may use the control commands that only read: status, sessions, luns, stats "+
			"and acl-check, not reload; with it the socket is mode 0666 and each client's credentials decide (SO_PEERCRED)")
	cmd.Flags().StringVar(&f.MetricsAddr, "metrics", "",
		"serve Prometheus metrics at http://`ADDR`/metrics (e.g. 127.0.0.1:9464; off by default; docs/metrics.md). Bind it to localhost "+
			"or a management network: whoever reaches it sees the LUNs, their load and the sessions")
	return cmd
}
