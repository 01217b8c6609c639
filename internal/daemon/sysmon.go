package daemon

import (
	"os"
	"strings"
	"syscall"
)

// sysmonAwake is the GODEBUG setting the daemon runs with: a scheduler trace so rare (every
// 2^31-1 ms, 24.8 days) that it is never read, whose side effect is the one wanted: the Go
// runtime's monitor thread (sysmon) does not park while every P is idle (runtime/proc.go,
// sysmon: "sysmon should not enter deep sleep if schedtrace is enabled").
//
// Why: parked, sysmon is woken by the first system call or cgo call after the process was
// idle (entersyscall's sysmonwait check), which for the daemon is the first completion poll
// after every wake-up of a channel. On a small host that is, per wake-up, a futex wake, up
// to two more context switches (sysmon's 20 µs sleep, then its park) and two more system calls;
// and a sysmon that starts over at 20 µs ticks takes the P away from a long ibv_post_send
// (soft-RoCE's requester work runs inside it) and wakes another thread for it; what that
// costs per I/O is measured in docs/benchmarks.md. Awake, sysmon backs off to one wake-up per
// 10 ms while nothing happens: 100 a second, the price.
//
// Only the environment sets it: the runtime reads GODEBUG's schedtrace once, at start-up,
// and //go:debug does not accept it. So the daemon executes itself again with it
// (reexecWithSysmonAwake). An operator's own GODEBUG schedtrace wins, schedtrace=0
// included (Go's default behaviour). One visible trace of the setting: the runtime prints a
// "SCHED" line on standard error when the host's uptime passes a multiple of 24.8 days.
const sysmonAwake = "schedtrace=2147483647"

// sysmonEnv returns env with sysmonAwake added to GODEBUG, and whether it changed: not when
// GODEBUG sets schedtrace already.
func sysmonEnv(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			out = append(out, kv)
			continue
		}
		if found {
			continue // a duplicate: getenv takes the first
		}
		found = true
		for _, s := range strings.Split(v, ",") {
			// As the runtime parses GODEBUG (runtime1.go, parsegodebug): no spaces trimmed.
			if strings.HasPrefix(s, "schedtrace=") {
				return env, false
			}
		}
		if v == "" {
			kv = "GODEBUG=" + sysmonAwake
		} else {
			kv += "," + sysmonAwake
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GODEBUG="+sysmonAwake)
	}
	return out, true
}

// reexecWithSysmonAwake executes the daemon again, same binary and arguments, with
// sysmonAwake in GODEBUG (see there), unless it runs with it or with its operator's own
// schedtrace. It returns only if it did nothing or the exec failed (then the daemon runs
// with sysmon's default behaviour, a matter of speed only). It executes the binary's path,
// not /proc/self/exe: the kernel names the process after the file executed (its comm), and
// ps, pgrep, rdma resource show and the logs must go on calling it srptarget.
func reexecWithSysmonAwake() error {
	env, changed := sysmonEnv(os.Environ())
	if !changed {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, env)
}
