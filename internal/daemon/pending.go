package daemon

// Listeners that wait for their address: at boot the adapter's driver, rdma_rxe or the
// address itself may come after srptarget. The daemon starts without them (every LUN, ACL and
// the control socket work) and listens on each as soon as an RDMA device has its address.

import (
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// serving reports whether at least one listener listens: initiators can log in.
func (d *daemon) serving() bool { return d.listening.Load() > 0 }

// pendingAddrs are the listeners that wait for an RDMA device with their address, sorted.
func (d *daemon) pendingAddrs() []listenAddr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pendingLocked()
}

func (d *daemon) pendingLocked() []listenAddr {
	out := make([]listenAddr, 0, len(d.pending))
	for ap := range d.pending {
		out = append(out, ap)
	}
	slices.SortFunc(out, listenAddr.compare)
	return out
}

// retryPending listens on every pending address that an RDMA device now has. It reports
// whether a listener came up. A listener that fails for another reason than a missing device
// (the port taken, say) is logged and stays pending: a reload or the next change tries again.
func (d *daemon) retryPending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped || len(d.pending) == 0 {
		return false
	}
	up := false
	for _, ap := range d.pendingLocked() {
		ln, err := d.open(ap)
		if err != nil {
			if !isNoDevice(err) {
				d.log.Error("cannot listen: trying again when the RDMA devices or the host's addresses change, or on reload",
					zap.Stringer("address", ap), zap.Error(err))
			}
			continue
		}
		if err := d.target.Prepare(ln); err != nil {
			_ = ln.Close()
			d.log.Error("cannot listen: registering the buffer pool of its device failed; trying again when the RDMA devices or the host's addresses change, or on reload",
				zap.Stringer("address", ap), zap.Error(err))
			continue
		}
		ls := &listenerState{addr: ap, ln: ln}
		d.listeners[ap] = ls
		delete(d.pending, ap)
		d.serve(ls)
		d.log.Info("listening", zap.Stringer("address", ap))
		up = true
	}
	if up && len(d.pending) == 0 {
		d.log.Info("every listener listens")
	}
	return up
}

// statusLine is the daemon's STATUS= (sd_notify(3)), what systemctl status shows: serving,
// or which listeners wait for an RDMA device.
func (d *daemon) statusLine() string {
	d.mu.Lock()
	pending := d.pendingLocked()
	listening := 0
	for _, ls := range d.listeners {
		if !ls.failed.Load() {
			listening++
		}
	}
	d.mu.Unlock()
	if len(pending) == 0 {
		return "serving"
	}
	addrs := make([]string, len(pending))
	for i, ap := range pending {
		addrs[i] = ap.String()
	}
	if listening == 0 {
		return "waiting for an RDMA device with the address of " + strings.Join(addrs, ", ")
	}
	return fmt.Sprintf("serving on %d %s; waiting for an RDMA device with the address of %s",
		listening, plural(listening, "listener"), strings.Join(addrs, ", "))
}

// plural is word for n of them.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
