package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/srptarget/srptarget/srp"
)

// The rows of limitSpecs that no constructor of a kind (intLimit, sizeLimit, durationLimit,
// shareLimit) makes: each knob whose default, check or summary is its own.

// maxTransferSizeRow is the row of max_transfer_size.
func maxTransferSizeRow() limitSpec {
	return limitSpec{
		key:  "max_transfer_size",
		fill: func(l *Limits) { fillZero(&l.MaxTransferSize, srp.DefaultMaxTransferLen) },
		check: func(l *Limits) (string, string) {
			if v := l.MaxTransferSize; v < 4096 || v > 64<<20 || v%4096 != 0 {
				return fmt.Sprintf("%v must be a multiple of 4KiB between 4KiB and 64MiB", v), ""
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { e.MaxTransferLen = uint32(l.MaxTransferSize) },
		show: func(l *Limits) string { return l.MaxTransferSize.String() },
	}
}

// bufferPoolSizeRow is the row of buffer_pool_size.
func bufferPoolSizeRow() limitSpec {
	return limitSpec{
		key:  "buffer_pool_size",
		fill: func(l *Limits) { fillZero(&l.BufferPoolSize, max(srp.DefaultBufferPoolSize, l.MaxTransferSize)) },
		check: func(l *Limits) (string, string) {
			if l.BufferPoolSize < l.MaxTransferSize || l.BufferPoolSize > 64<<30 {
				return fmt.Sprintf("%v must be at least max_transfer_size (%v) and at most 64GiB", l.BufferPoolSize, l.MaxTransferSize), ""
			}
			if ram, err := totalRAM(); err == nil && int64(l.BufferPoolSize) > ram {
				// The pool is pinned (registered for RDMA, see mlock(2)) on each device: it
				// cannot be swapped out, so one larger than RAM can never be registered.
				return fmt.Sprintf("%v is more than this machine's RAM (%v): the pool is locked in RAM for RDMA, once per device", l.BufferPoolSize, Size(ram)), ""
			}
			return "", ""
		},
		set:  func(l *Limits, e *srp.Limits) { e.BufferPoolSize = int64(l.BufferPoolSize) },
		show: func(l *Limits) string { return l.BufferPoolSize.String() },
	}
}

// immediateDataRow is the row of immediate_data.
func immediateDataRow() limitSpec {
	return limitSpec{
		key: "immediate_data",
		fill: func(l *Limits) {
			if l.ImmediateData == nil {
				yes := true
				l.ImmediateData = &yes
			}
		},
		check: func(*Limits) (string, string) { return "", "" },
		set:   func(l *Limits, e *srp.Limits) { e.DisableImmediateData = !*l.ImmediateData },
		show:  func(l *Limits) string { return fmt.Sprint(*l.ImmediateData) },
	}
}

// completionRow is the row of completion.
func completionRow() limitSpec {
	row := wordLimit("completion", func(l *Limits) *string { return &l.Completion },
		srp.DefaultCompletion.String(), "completion mode", "event, adaptive or poll",
		srp.ParseCompletionMode, func(e *srp.Limits, m srp.CompletionMode) { e.Completion = m })
	row.unsummarized = true
	return row
}

// maxInitiatorBufferRow is the row of max_initiator_buffer.
func maxInitiatorBufferRow() limitSpec {
	return limitSpec{
		key:  "max_initiator_buffer",
		fill: func(l *Limits) { fillZero(&l.MaxInitiatorBuffer, DefaultMaxInitiatorBuffer) },
		check: func(l *Limits) (string, string) {
			if _, err := parseShare(l.MaxInitiatorBuffer, int64(l.BufferPoolSize)); err != nil {
				return err.Error(), ""
			}
			return "", ""
		},
		set: func(l *Limits, e *srp.Limits) {
			e.MaxInitiatorBuffer, _ = parseShare(l.MaxInitiatorBuffer, int64(l.BufferPoolSize))
		},
		show: func(l *Limits) string {
			n, _ := parseShare(l.MaxInitiatorBuffer, int64(l.BufferPoolSize))
			if strings.HasSuffix(l.MaxInitiatorBuffer, "%") {
				return fmt.Sprintf("%v (%s)", Size(n), l.MaxInitiatorBuffer)
			}
			return Size(n).String()
		},
	}
}

// idleTimeoutRow is the row of idle_timeout.
func idleTimeoutRow() limitSpec {
	return limitSpec{
		key:  "idle_timeout",
		fill: func(*Limits) {}, // 0, off
		check: func(l *Limits) (string, string) {
			if d := time.Duration(l.IdleTimeout); d != 0 && (d < time.Second || d > 24*time.Hour) {
				return fmt.Sprintf("%q must be 0 (off) or a duration between 1s and 24h, such as 10m", l.IdleTimeout), ""
			}
			return "", ""
		},
		set: func(l *Limits, e *srp.Limits) { e.IdleTimeout = time.Duration(l.IdleTimeout) },
		show: func(l *Limits) string {
			if l.IdleTimeout == 0 {
				return "off"
			}
			return l.IdleTimeout.String()
		},
	}
}

// schedulingRow is the row of scheduling.
func schedulingRow() limitSpec {
	return limitSpec{
		key:  "scheduling",
		fill: func(l *Limits) { fillZero(&l.Scheduling, DefaultScheduling) },
		check: func(l *Limits) (string, string) {
			switch l.Scheduling {
			case SchedulingInherit, SchedulingNormal, SchedulingBatch:
				return "", ""
			}
			return fmt.Sprintf("%q is not a scheduling policy: use inherit, normal or batch", l.Scheduling), ""
		},
		show:         func(l *Limits) string { return l.Scheduling }, // the daemon's, not the engine's
		unsummarized: true,
	}
}

// backstoreIORow is the row of backstore_io.
func backstoreIORow() limitSpec {
	return wordLimit("backstore_io", func(l *Limits) *string { return &l.BackstoreIO },
		srp.BackstoreIOAuto.String(), "backstore I/O engine", "auto, sync or io_uring",
		srp.ParseBackstoreIO, func(e *srp.Limits, b srp.BackstoreIO) { e.BackstoreIO = b })
}
