package main

import (
	"os"
	"runtime"
)

// minProcs is the fewest Go scheduler Ps (GOMAXPROCS) the daemon runs with, even on a host
// that gives it one CPU. A channel spends much of its time in cgo calls into rdma-core, and
// some are long: soft-RoCE does its protocol work inside ibv_post_send. While a goroutine is
// in such a call its P stays with it, unless sysmon retakes it: after one sysmon tick (20 µs
// at least) sysmon retakes a P in a system call or cgo call when no other P is idle or
// spinning (runtime/proc.go, retake), and hands it to another thread (handoffp), which the
// call's return must then wait to take back. With one P that is every long call: on a 1-vCPU
// target the daemon's CPU profile had the Go scheduler at about 12 % of its CPU
// (entersyscallWakeSysmon, stopm, exitsyscall's slow path) and 8 wake-ups per I/O at QD 1
// (docs/benchmarks.md). With a second P idle, a long call keeps its P. The extra P costs nothing when it has no work: the kernel still has the one
// CPU to share.
const minProcs = 2

// schedulerProcs returns the GOMAXPROCS the daemon sets: at least minProcs, the runtime's
// choice (the CPUs it may run on) when more. GOMAXPROCS in the environment (env) is the
// operator's choice and is kept: it returns 0, leave it.
func schedulerProcs(current int, env string) int {
	if env != "" || current >= minProcs {
		return 0
	}
	return minProcs
}

// setSchedulerProcs applies schedulerProcs to this process and returns the GOMAXPROCS in force.
func setSchedulerProcs() int {
	if n := schedulerProcs(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0)
}
