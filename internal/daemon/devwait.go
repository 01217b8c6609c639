package daemon

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
func isNoDevice(err error) bool {
	return errors.Is(err, errNoRDMAKernel) || errors.Is(err, errNoIBPortYet)
}

// deviceMissing reports whether the device list says that there is no RDMA device. Any other
// answer (a device, or an error of another kind, such as the tests' "no devices") lets the
// start decide.
func deviceMissing(devices DevicesFunc) bool {
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

// startWhenDevice starts the daemon in two stages. At boot, systemd may start srptarget
// before the HCA's driver or rdma_rxe has created the RDMA device, or before a listener's
// address is on it. Everything that can be checked without a device is checked first, and a
// failure there fails the start with the reason: the configuration, its warnings logged, the
// locked memory the buffer pools will need, every backstore opened and the state files read.
// Then:
//
//   - When the target identity is known (target.id_ext in the configuration, or a device to
//     take the node GUID from), the daemon starts at once: the LUNs, the ACLs and the control
//     socket work, each listener listens as soon as an RDMA device has its address (the
//     others wait, daemon.retryPending), and STATUS= says which wait.
//   - Otherwise (no device and no configured identity: the LUNs' serial numbers and the SRP
//     target port identifier are the first device's node GUID) it waits for a device, with
//     STATUS= saying so, and starts when one appears. A start that fails then is logged with
//     its reasons and tried again on reload or when the devices change; the service stays up.
//
// Either way systemd hears READY=1 once the first stage passed: the service is up and will
// serve without anyone's help, and a unit that stayed "activating" would hold up
// multi-user.target until TimeoutStartSec killed it. It returns the started daemon; nil and
// nil when SIGTERM or SIGINT came during the wait; or ExitError after logging why the
// start failed.
func startWhenDevice(opts serveOptions, prof *cpuProfiler) (*daemon, error) {
	log := opts.log
	poll := opts.devicePoll
	if poll <= 0 {
		poll = DefaultDevicePoll
	}
	// The state is taken before the device list is looked at: a device that appears in
	// between then differs from it, and the wait ends at its first poll.
	since := hostState(opts.daemonOptions)
	cfg, err := config.LoadTrusted(opts.configFile)
	if err != nil {
		return nil, startRefused(log, err)
	}
	bio := resolveBackstoreIO(cfg)
	if bio.err != nil {
		return nil, startRefused(log, bio.err)
	}
	bio.log(log)
	if _, err := ResolveIdentity(cfg.Target, opts.devices); err == nil || !deviceMissing(opts.devices) {
		d := newDaemon(opts.daemonOptions)
		if err := d.start(); err != nil {
			d.release()
			return nil, startRefused(log, err)
		}
		return d, nil
	}
	if err := preflight(opts.daemonOptions, cfg, true); err != nil {
		return nil, startRefused(log, err)
	}
	log.Warn("no RDMA device yet: waiting for one (the driver of the adapter, or rdma_rxe, may not be loaded yet); the target identity will be its node GUID (or set target.id_ext); SIGTERM stops",
		zap.Duration("poll", poll))
	notify(log, sddaemon.SdNotifyReady, "STATUS="+statusWaitingDevice)
	for {
		if stop := waitForDevice(opts, prof, poll, since); stop {
			return nil, nil
		}
		since = hostState(opts.daemonOptions)
		d := newDaemon(opts.daemonOptions)
		err := d.start()
		if err == nil {
			return d, nil
		}
		d.release()
		logConfigErrors(log, err)
		log.Error("the start failed once an RDMA device appeared: fix what the errors say and reload (systemctl reload srptarget); trying again when the RDMA devices or the host's addresses change",
			zap.Int("errors", countErrors(err)))
		notify(log, "STATUS=the start failed once an RDMA device appeared (journalctl -u srptarget -p err); waiting for a reload")
	}
}

// statusWaitingDevice is STATUS= and srptarget status's state while serve waits for a device.
const statusWaitingDevice = "waiting for an RDMA device"

// startRefused logs why the first stage of the start failed and returns exit status 1.
func startRefused(log *zap.Logger, err error) error {
	logConfigErrors(log, err)
	log.Error("srptarget did not start", zap.Int("errors", countErrors(err)))
	return ExitError{1}
}

// release undoes a failed start: the buffer pool of a device whose listener did listen.
func (d *daemon) release() {
	if d.target == nil {
		return
	}
	if err := d.target.Shutdown(context.Background()); err != nil {
		d.log.Warn("releasing the target of a failed start", zap.Error(err))
	}
}

// preflight is the first stage of a start without a device (and what a reload checks while
// serve waits): the configuration's warnings (logged when warn), the locked memory,
// every backstore opened (a missing file with create: true stands in as null) and the state
// files read, all of it released again.
func preflight(opts daemonOptions, cfg *config.Config, warn bool) error {
	d := newDaemon(opts)
	if warn {
		logWarnings(d.log, cfg)
	}
	if err := checkMemlock(opts.memlock, opts.devices, cfg, d.log); err != nil {
		return err
	}
	p, err := d.planWith(cfg, true, nil)
	if err != nil {
		return err
	}
	p.rollback()
	d.closers.Wait()
	return nil
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
				_, err := checkWhileWaiting(opts.daemonOptions)
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
func checkWhileWaiting(opts daemonOptions) (*config.Config, error) {
	log := opts.log
	notifyReloading(log)
	cfg, err := config.LoadTrusted(opts.configFile)
	if err == nil {
		err = preflight(opts, cfg, true)
	}
	if err != nil {
		logConfigErrors(log, err)
		log.Error("reload while waiting for an RDMA device: the configuration has errors; it is read again when a device appears",
			zap.Int("errors", countErrors(err)))
	} else {
		log.Info("reload while waiting for an RDMA device: the configuration is valid")
	}
	notify(log, sddaemon.SdNotifyReady, "STATUS="+statusWaitingDevice)
	return cfg, err
}
