package srp

import (
	"fmt"
	"sync"

	"github.com/srptarget/srptarget/backstore"
)

// BackstoreIO is how the engine does the reads and writes of file and block logical units
// (Limits.BackstoreIO).
type BackstoreIO uint8

const (
	// BackstoreIOAuto is BackstoreIOURing where io_uring works here, else BackstoreIOSync.
	BackstoreIOAuto BackstoreIO = iota
	// BackstoreIOSync: a blocking call per command on a worker goroutine.
	BackstoreIOSync
	// BackstoreIOURing: through an io_uring of each poll group, whose pass submits the
	// requests its channels started and reaps the completions (scsi.LUNMap.Start). New fails
	// where io_uring does not work.
	BackstoreIOURing
)

// String names the mode as the configuration does.
func (m BackstoreIO) String() string {
	switch m {
	case BackstoreIOAuto:
		return "auto"
	case BackstoreIOSync:
		return "sync"
	case BackstoreIOURing:
		return "io_uring"
	}
	return fmt.Sprintf("BackstoreIO(%d)", uint8(m))
}

// ParseBackstoreIO parses the configuration's names for the modes.
func ParseBackstoreIO(s string) (BackstoreIO, error) {
	for m := BackstoreIOAuto; m <= BackstoreIOURing; m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("backstore I/O %q: want auto, sync or io_uring", s)
}

// probeAsync is backstore.ProbeAsync; tests replace it.
var probeAsync = backstore.ProbeAsync

var asyncProbe struct {
	once sync.Once
	err  error
}

// ResolveBackstoreIO returns the engine that m comes to on this host: BackstoreIOSync or
// BackstoreIOURing. unavailable is why io_uring does not work here (the kernel, its
// io_uring_disabled sysctl, a seccomp filter such as systemd's SystemCallFilter=), nil where it
// does or where m does not ask for it; with m BackstoreIOURing the caller refuses to start
// then. The probe runs once per process.
func ResolveBackstoreIO(m BackstoreIO) (engine BackstoreIO, unavailable error) {
	if m == BackstoreIOSync {
		return BackstoreIOSync, nil
	}
	asyncProbe.once.Do(func() { asyncProbe.err = probeAsync() })
	if asyncProbe.err != nil {
		return BackstoreIOSync, asyncProbe.err
	}
	return BackstoreIOURing, nil
}

// backstoreIOState is what New found of Limits.BackstoreIO.
type backstoreIOState struct {
	engine      BackstoreIO // BackstoreIOSync or BackstoreIOURing
	unavailable error       // why io_uring is not used, when it was wanted
}

// resolveBackstoreIO settles the engine of Limits.BackstoreIO want, or fails where it asks
// for io_uring and io_uring does not work.
func resolveBackstoreIO(want BackstoreIO) (backstoreIOState, error) {
	engine, why := ResolveBackstoreIO(want)
	if want == BackstoreIOURing && why != nil {
		return backstoreIOState{}, fmt.Errorf("srp: limits: backstore I/O io_uring: %w", why)
	}
	return backstoreIOState{engine: engine, unavailable: why}, nil
}
