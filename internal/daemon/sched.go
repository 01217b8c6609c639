package daemon

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/config"
)

// schedFunc applies a scheduling policy (config.Limits.Scheduling) to the whole process.
type schedFunc func(policy string) error

// setScheduling gives every thread of the process the scheduling policy (sched(7)):
// SCHED_BATCH for config.SchedulingBatch, SCHED_OTHER for config.SchedulingNormal; with
// config.SchedulingInherit it changes nothing. The policy
// is per thread; a new thread inherits its creator's (pthread_create's default
// PTHREAD_INHERIT_SCHED, clone(2) without SCHED_RESET_ON_FORK), so once every thread has it,
// the threads the Go runtime starts later have it too. A thread started while the list is
// walked may have been created by one not yet switched: the walk repeats until it finds
// nothing left to switch. Any thread may switch itself or its process's threads between
// these two policies without privilege.
func setScheduling(policy string) error {
	want := uint32(unix.SCHED_NORMAL)
	switch policy {
	case config.SchedulingInherit:
		return nil
	case config.SchedulingNormal:
	case config.SchedulingBatch:
		want = unix.SCHED_BATCH
	default:
		return fmt.Errorf("scheduling policy %q: use inherit, normal or batch", policy)
	}
	done := map[int]bool{}
	for range 10 {
		tids, err := threadIDs()
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: want}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread has exited
				}
				return fmt.Errorf("sched_setattr(%d, %s): %w", tid, policy, err)
			}
			done[tid], changed = true, true
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// threadIDs lists the process's threads (/proc/self/task, proc(5)).
func threadIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing the threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// applyScheduling gives the daemon's threads the configured scheduling policy. It cannot
// change on reload, so start-up is the one place. A policy that cannot be applied (a seccomp
// filter, say) costs speed, not correctness: it is logged and the daemon goes on.
func applyScheduling(sched schedFunc, cfg *config.Config, log *zap.Logger) {
	if sched == nil {
		return
	}
	policy := cfg.Limits.Scheduling
	if policy == config.SchedulingInherit {
		return
	}
	if err := sched(policy); err != nil {
		log.Warn("could not set the threads' scheduling policy; running with the one inherited",
			zap.String("scheduling", policy), zap.Error(err),
			zap.String("hint", "limits.scheduling: inherit silences this; see configs/README.md"))
		return
	}
	log.Info("scheduling policy", zap.String("scheduling", policy), zap.Int("cpus", runtime.NumCPU()))
}
