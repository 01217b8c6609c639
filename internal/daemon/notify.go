package daemon

import (
	"strings"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// notify tells the service manager about the daemon's state through the sd_notify(3)
// protocol: one datagram to the unix socket named by $NOTIFY_SOCKET, with one VAR=value per
// line. Without NOTIFY_SOCKET (not started by systemd with Type=notify) it does nothing.
// NOTIFY_SOCKET is left in the environment: the daemon notifies for its whole life (reloads,
// shutdown), not only at start-up. A failure is logged and otherwise ignored, as sd_notify(3)
// advises: the service works the same whether or not the manager listens.
func notify(log *zap.Logger, states ...string) {
	msg := strings.Join(states, "\n")
	if _, err := sddaemon.SdNotify(false, msg); err != nil {
		log.Warn("telling systemd the daemon's state (sd_notify) failed", zap.String("state", msg), zap.Error(err))
	}
}

// notifyReloading says that a reload begins. sd_notify(3): with RELOADING=1, systemd 253 and
// later want MONOTONIC_USEC= (CLOCK_MONOTONIC in microseconds) in the same datagram, so that
// it can tell this reload from an older one; older versions ignore the field. READY=1 must
// follow when the reload is done, whether it took effect or not.
func notifyReloading(log *zap.Logger) {
	states := []string{sddaemon.SdNotifyReloading}
	if usec := strings.TrimSuffix(sddaemon.SdNotifyMonotonicUsec(), "\n"); usec != "" {
		states = append(states, usec)
	}
	notify(log, append(states, "STATUS=reloading the configuration")...)
}

// notifyReloaded says that a reload is done (READY=1 follows every RELOADING=1), and in STATUS
// the daemon's status and whether the reload failed.
func notifyReloaded(log *zap.Logger, err error, status string) {
	if err != nil {
		status += "; the last reload failed and changed nothing"
	}
	notify(log, sddaemon.SdNotifyReady, "STATUS="+status)
}
