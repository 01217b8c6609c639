package daemon

import (
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/srp"
)

// backstoreIO is what limits.backstore_io comes to on this host: the engine (io_uring or
// sync) and, when it is not what the configuration asked for or allowed, why.
type backstoreIO struct {
	configured srp.BackstoreIO
	engine     srp.BackstoreIO
	note       string
	why        error // why io_uring does not work here, when it was wanted
	err        error // io_uring was required and does not work
}

// resolveBackstoreIO probes io_uring (once per process) for the configuration's
// limits.backstore_io (validated).
func resolveBackstoreIO(cfg *config.Config) backstoreIO {
	m, _ := srp.ParseBackstoreIO(cfg.Limits.BackstoreIO)
	engine, why := srp.ResolveBackstoreIO(m)
	b := backstoreIO{configured: m, engine: engine, why: why}
	switch {
	case m == srp.BackstoreIOSync:
		b.note = "limits.backstore_io: sync"
	case why != nil && m == srp.BackstoreIOURing:
		b.err = cfg.ErrorAt(config.At("limits", "backstore_io"), "io_uring does not work here: %v (the kernel, sysctl kernel.io_uring_disabled, or a seccomp filter such as the unit's SystemCallFilter=); use auto or sync", why)
	case why != nil:
		b.note = "io_uring does not work here: " + why.Error()
	}
	return b
}

// log writes the start-up line of the backstore I/O engine: information, or a warning when
// auto fell back to sync.
func (b backstoreIO) log(log *zap.Logger) {
	fields := []zap.Field{zap.Stringer("engine", b.engine), zap.Stringer("configured", b.configured)}
	if b.configured == srp.BackstoreIOAuto && b.engine == srp.BackstoreIOSync {
		log.Warn("backstore I/O: blocking calls on worker goroutines, io_uring does not work here",
			append(fields, zap.NamedError("why", b.why), zap.String("hint", "limits.backstore_io: sync silences this; see configs/README.md"))...)
		return
	}
	log.Info("backstore I/O", fields...)
}
