package srp

import (
	"sync"
	"time"
)

// Refused logins are logged per source address at most rejectLogBurst times per
// rejectLogEvery: enough to see what a misconfigured initiator is told on each of its retries,
// too few for a flood of logins to flood the log (journald's own rate limit does not protect a
// file sink).
const (
	rejectLogBurst = 5
	rejectLogEvery = 10 * time.Second
	// logLimiterKeys bounds the sources remembered; beyond it the oldest windows are dropped.
	logLimiterKeys = 1024
)

// logLimiter is a fixed-window rate limit on log lines, per key.
type logLimiter struct {
	burst int
	every time.Duration

	mu   sync.Mutex
	keys map[string]*logWindow
}

type logWindow struct {
	start      time.Time
	n          int // lines allowed in this window
	suppressed int // lines refused since the last allowed one
}

func newLogLimiter(burst int, every time.Duration) *logLimiter {
	return &logLimiter{burst: burst, every: every, keys: make(map[string]*logWindow)}
}

// allow reports whether a line for key may be written at now and, when it may, how many lines
// for key were suppressed since the last one written.
func (l *logLimiter) allow(key string, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= logLimiterKeys {
			l.pruneLocked(now)
		}
		w = &logWindow{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= l.every {
		w.start, w.n = now, 0
	}
	if w.n >= l.burst {
		w.suppressed++
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// pruneLocked drops the windows that have ended, and everything if none has: a flood from
// ever new sources then costs at most logLimiterKeys entries.
func (l *logLimiter) pruneLocked(now time.Time) {
	for k, w := range l.keys {
		if now.Sub(w.start) >= l.every {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= logLimiterKeys {
		clear(l.keys)
	}
}
