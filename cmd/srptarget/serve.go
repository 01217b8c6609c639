package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// serveOptions are the daemon's options plus how it meets the process: the signals it gets
// and how it exits at once on a second one. Tests feed signals through a channel.
type serveOptions struct {
	daemonOptions
	signals         <-chan os.Signal
	exit            func(code int)
	shutdownTimeout time.Duration

	// Test hooks: ready is called once the daemon serves, afterReload with the result of each
	// SIGHUP reload, beforeShutdown once the first SIGTERM/SIGINT is handled (and the watcher
	// for a second one runs) but before the target shuts down.
	ready          func(*daemon)
	afterReload    func(error)
	beforeShutdown func()
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
// the shutdown exits at once. It returns nil after a clean shutdown (exit status 0).
func runServe(opts serveOptions) error {
	log := opts.log
	if opts.shutdownTimeout <= 0 {
		opts.shutdownTimeout = DefaultShutdownTimeout
	}
	d := newDaemon(opts.daemonOptions)
	if err := d.start(); err != nil {
		logConfigErrors(log, err)
		log.Error("srptarget did not start", zap.Int("errors", countErrors(err)))
		return exitCodeError{1}
	}
	log.Info("srptarget ready: SIGHUP reloads the configuration, SIGTERM or SIGINT stops", zap.Int("pid", os.Getpid()))
	if opts.ready != nil {
		opts.ready(d)
	}
	var stopSig os.Signal
	for stopSig == nil {
		sig, ok := <-opts.signals
		if !ok {
			stopSig = syscall.SIGTERM
			break
		}
		switch sig {
		case syscall.SIGHUP:
			err := d.reload()
			if opts.afterReload != nil {
				opts.afterReload(err)
			}
		case syscall.SIGTERM, os.Interrupt:
			stopSig = sig
		default:
			log.Debug("ignoring signal", zap.Stringer("signal", sig))
		}
	}
	log.Info("shutting down: logging every channel out and finishing outstanding commands; a second signal exits at once",
		zap.Stringer("signal", stopSig), zap.Duration("timeout", opts.shutdownTimeout))
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
				if sig == syscall.SIGTERM || sig == os.Interrupt {
					log.Error("second signal: exiting at once without finishing the shutdown", zap.Stringer("signal", sig))
					_ = log.Sync()
					opts.exit(signalExitCode(sig))
					return
				}
				log.Info("ignoring signal during shutdown", zap.Stringer("signal", sig))
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
	log.Info("stopped")
	return nil
}

// logConfigErrors logs each configuration error on its own line.
func logConfigErrors(log *zap.Logger, err error) {
	var errs ConfigErrors
	var one *ConfigError
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
	var errs ConfigErrors
	if errors.As(err, &errs) {
		return len(errs)
	}
	return 1
}

func newServeCommand() *cobra.Command {
	var configFile, logFormat, logLevel string
	var shutdownTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the SRP target",
		Long: `Run the SRP target described by the configuration file.

SIGHUP reloads the configuration: it takes effect entirely or, on any error, not at all.
SIGTERM or SIGINT log every initiator out, finish outstanding commands, flush every
backstore and exit 0; a second signal exits at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sigs)
			log.Info("srptarget starting", zap.String("version", version), zap.String("config", configFile))
			return runServe(serveOptions{
				daemonOptions: daemonOptions{
					configFile: configFile,
					log:        log,
					listen:     rdmaListen(log),
					devices:    rdmaDevices,
					interfaces: hostAddrs,
				},
				signals:         sigs,
				exit:            os.Exit,
				shutdownTimeout: shutdownTimeout,
			})
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "configuration file (YAML, see configs/README.md)")
	cmd.Flags().StringVar(&logFormat, "log-format", "console", "log format: console or json")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().DurationVar(&shutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long SIGTERM waits for outstanding commands")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}
