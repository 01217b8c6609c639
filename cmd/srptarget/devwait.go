package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
)

// DefaultDevicePoll is how often serve looks for an RDMA device while it waits for one.
// libibverbs has no notification of a new device that a process could wait on
// (ibv_get_device_list(3) reads sysfs each time), and the daemon's own RDMA/CM channel does not
// exist before a device does, so it polls: a second is quick enough next to a boot or a driver
// load, and one sysfs scan a second costs nothing.
const DefaultDevicePoll = time.Second

// isNoDevice reports whether err means that the host has no RDMA device yet, or none with the
// address a listener names: the RDMA driver or rdma_rxe not loaded (ENOSYS, ENODEV, no
// /dev/infiniband/rdma_cm), or the address not yet on an RDMA device's netdev
// (rdma_bind_addr(3): EADDRNOTAVAIL). rdmaError marks those errors of ib/verbs with
// errNoRDMAKernel.
func isNoDevice(err error) bool { return errors.Is(err, errNoRDMAKernel) }

// deviceMissing reports whether the device list says that there is no RDMA device. Any other
// answer (a device, or an error of another kind, such as the tests' "no devices") lets the
// start decide.
func deviceMissing(devices devicesFunc) bool {
	if devices == nil {
		return false
	}
	devs, err := devices()
	if err != nil {
		return isNoDevice(err)
	}
	return len(devs) == 0
}

// hostState is what a start that found no device depends on: the RDMA devices, with their
// ports' states and GIDs (a RoCE port gains a GID when its netdev gains an address), and the
// host's addresses (an IPoIB address is in no GID). A wait ends when it changes.
func hostState(opts daemonOptions) string {
	var b strings.Builder
	if opts.devices != nil {
		devs, err := opts.devices()
		fmt.Fprintf(&b, "%+v %v", devs, err)
	}
	if opts.interfaces != nil {
		addrs, err := opts.interfaces()
		fmt.Fprintf(&b, "|%+v %v", addrs, err)
	}
	return b.String()
}

// startWhenDevice starts the daemon. At boot, systemd may start srptarget before the HCA's
// driver or rdma_rxe has created the RDMA device, or before the address of a listener is on
// it; rather than fail (and leave the disks of its initiators away until someone restarts
// it), serve then checks the configuration, logs that it waits, and starts once the device
// list shows a device and every listener can listen. It returns the started daemon; nil and
// nil when SIGTERM or SIGINT came during the wait; or exitCodeError after logging why the
// start failed.
//
// A start that failed only because a listener found no device is tried again when the
// devices or the host's addresses change (hostState), or on SIGHUP, not at every poll: each
// attempt opens the backstores and registers a buffer pool per device, and logs it.
//
// While it waits it has told systemd READY=1 with STATUS= saying that it waits: the service
// is up and will serve without anyone's help, and a unit that stayed "activating" would hold
// up multi-user.target (ordered after the units it wants) until TimeoutStartSec killed it.
func startWhenDevice(opts serveOptions, prof *cpuProfiler) (*daemon, error) {
	log := opts.log
	poll := opts.devicePoll
	if poll <= 0 {
		poll = DefaultDevicePoll
	}
	// The state is taken before the device list is looked at: a device that appears in
	// between then differs from it, and the wait ends at its first poll.
	initial := hostState(opts.daemonOptions)
	if deviceMissing(opts.devices) {
		// A configuration that can never start fails now, not once a device appears.
		if _, err := config.LoadTrusted(opts.configFile); err != nil {
			logConfigErrors(log, err)
			log.Error("srptarget did not start", zap.Int("errors", countErrors(err)))
			return nil, exitCodeError{1}
		}
		log.Warn("no RDMA device yet: waiting for one (the driver of the adapter, or rdma_rxe, may not be loaded yet); SIGTERM stops",
			zap.Duration("poll", poll))
		notify(log, sddaemon.SdNotifyReady, "STATUS=waiting for an RDMA device")
		if stop := waitForDevice(opts, prof, poll, initial); stop {
			return nil, nil
		}
	}
	logged := ""
	for {
		before := hostState(opts.daemonOptions)
		d := newDaemon(opts.daemonOptions)
		err := d.start()
		if err == nil {
			return d, nil
		}
		if d.target != nil {
			// The failed start may have registered the buffer pool of a device whose
			// listener did listen: release it before the next attempt.
			if serr := d.target.Shutdown(context.Background()); serr != nil {
				log.Warn("releasing the target of a failed start", zap.Error(serr))
			}
		}
		if !d.noDevice && !deviceMissing(opts.devices) {
			logConfigErrors(log, err)
			log.Error("srptarget did not start", zap.Int("errors", countErrors(err)))
			return nil, exitCodeError{1}
		}
		// Once per distinct failure: an address that never comes (a typo) must not fill the
		// journal.
		if msg := err.Error(); msg != logged {
			logged = msg
			var errs config.Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					log.Warn("cannot listen yet", zap.String("error", e.Error()), zap.String("file", e.File), zap.Int("line", e.Line))
				}
			}
			log.Warn("no RDMA device has the address of a listener yet: waiting, and trying again when the RDMA devices or the host's addresses change, or on SIGHUP; SIGTERM stops",
				zap.Duration("poll", poll))
			notify(log, sddaemon.SdNotifyReady, "STATUS=waiting for an RDMA device")
		}
		if stop := waitForDevice(opts, prof, poll, before); stop {
			return nil, nil
		}
	}
}

// waitForDevice waits (the caller has told systemd so), handling signals, until the device
// list shows an RDMA device and hostState differs from since, or until a SIGHUP finds a
// device. It reports true when SIGTERM or SIGINT (or the end of the signals) asked it to stop
// instead.
func waitForDevice(opts serveOptions, prof *cpuProfiler, poll time.Duration, since string) (stop bool) {
	log := opts.log
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for missing := false; ; {
		select {
		case <-ticker.C:
			if deviceMissing(opts.devices) {
				missing = true
				continue
			}
			if hostState(opts.daemonOptions) == since {
				continue
			}
			if missing {
				log.Info("an RDMA device is present: starting")
			} else {
				log.Info("the RDMA devices or the host's addresses changed: trying to start again")
			}
			return false
		case <-opts.retry:
			// srptarget reload found the configuration valid (waitingReload).
			if !deviceMissing(opts.devices) {
				return false
			}
		case sig, ok := <-opts.signals:
			if !ok {
				sig = syscall.SIGTERM
			}
			switch {
			case sig == syscall.SIGTERM || sig == os.Interrupt:
				notify(log, sddaemon.SdNotifyStopping, "STATUS=stopping")
				log.Info("stopping while waiting for an RDMA device: nothing was serving", zap.Stringer("signal", sig))
				return true
			case sig == syscall.SIGHUP:
				// Nothing runs yet: check the file, so that whoever reloads learns now whether
				// it will start, and try to start if there is a device.
				_, err := checkWhileWaiting(log, opts.configFile)
				if opts.afterReload != nil {
					opts.afterReload(err)
				}
				if err == nil && !deviceMissing(opts.devices) {
					return false
				}
			case isProfileSignal(sig):
				handleProfileSignal(log, prof, sig)
				if opts.afterProfileSignal != nil {
					opts.afterProfileSignal()
				}
			default:
				log.Debug("ignoring signal", zap.Stringer("signal", sig))
			}
		}
	}
}

// checkWhileWaiting is a reload while serve waits for a device: nothing runs yet, so the
// file is only checked (as a start would), and the errors are logged. It tells systemd of the
// reload as a reload of a serving daemon does.
func checkWhileWaiting(log *zap.Logger, file string) (*config.Config, error) {
	notifyReloading(log)
	cfg, err := config.LoadTrusted(file)
	if err != nil {
		logConfigErrors(log, err)
		log.Error("reload while waiting for an RDMA device: the configuration has errors; it is read again when a device appears",
			zap.Int("errors", countErrors(err)))
	} else {
		log.Info("reload while waiting for an RDMA device: the configuration is valid")
	}
	notify(log, sddaemon.SdNotifyReady, "STATUS=waiting for an RDMA device")
	return cfg, err
}

// waitingReload answers srptarget reload (and validate --diff) while serve waits for a
// device: the configuration checked, every error in the answer, and, when it is valid, serve
// told to try to start now. Nothing is applied: what is checked is what a start would refuse.
func (s *controlServer) waitingReload(req controlRequest) (*reloadResult, error) {
	res := &reloadResult{DryRun: req.DryRun}
	var err error
	switch {
	case req.ConfigYAML != "" && !req.DryRun:
		return nil, errors.New("a configuration sent with the request can only be planned (dry run), not applied: write the file and reload")
	case req.ConfigYAML != "":
		_, err = config.Parse(req.ConfigName, []byte(req.ConfigYAML))
	case req.DryRun:
		_, err = config.LoadTrusted(s.opts.configFile)
	default:
		s.log.Info("reload requested on the control socket while waiting for an RDMA device")
		_, err = checkWhileWaiting(s.log, s.opts.configFile)
	}
	if err != nil {
		var errs config.Errors
		var one *config.Error
		switch {
		case errors.As(err, &errs):
		case errors.As(err, &one):
			errs = config.Errors{one}
		default:
			errs = config.Errors{{File: s.opts.configFile, Msg: err.Error()}}
		}
		for _, e := range errs {
			res.Errors = append(res.Errors, e.Error())
		}
		return res, nil
	}
	res.Waiting = true
	if !req.DryRun {
		select {
		case s.retry <- struct{}{}:
		default:
		}
	}
	return res, nil
}
