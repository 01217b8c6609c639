// Package loglimit keeps repeated log lines from flooding the log: a line that a peer can
// cause (a refused login, a refused command, a connection over the cap, accept(2) failing)
// is written at most Burst times per window of Every, and the next line written says how
// many were left out. journald's own rate limit does not protect a file sink, and it drops
// lines without saying which.
package loglimit

import (
	"sync"
	"time"
)

// Window is a fixed-window limit: at most Burst lines (1 if unset) per Every. Its owner
// serialises the calls (a channel's goroutine); Locked and Keyed are the shared forms.
type Window struct {
	Burst int
	Every time.Duration

	start      time.Duration // on the caller's clock; the window starts with its first line
	started    bool
	n          int // lines allowed in this window
	suppressed int // lines refused since the last allowed one
}

// Allow reports whether a line may be written at now (on any monotonic clock, as a duration
// since its epoch) and, when it may, how many lines were refused since the last one written.
func (w *Window) Allow(now time.Duration) (ok bool, suppressed int) {
	if !w.started || now-w.start >= w.Every {
		w.start, w.started, w.n = now, true, 0
	}
	if w.n >= max(w.Burst, 1) {
		w.suppressed++
		return false, 0
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// Locked is a Window that several goroutines share, on the wall clock.
type Locked struct {
	mu sync.Mutex
	w  Window
}

// NewLocked makes a Locked window of burst lines per every.
func NewLocked(burst int, every time.Duration) *Locked {
	return &Locked{w: Window{Burst: burst, Every: every}}
}

// Allow is Window.Allow at time.Now.
func (l *Locked) Allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Allow(time.Since(epoch))
}

var epoch = time.Now()

// Keyed is a Window per key (a source address), for lines that each peer may cause: one
// flooding peer does not silence the lines of another. At most MaxKeys windows are kept;
// beyond it the ended ones are dropped, and all of them if none has ended, so that a flood
// from ever new keys costs at most MaxKeys entries.
type Keyed struct {
	burst int
	every time.Duration

	mu   sync.Mutex
	keys map[string]*Window
}

// MaxKeys bounds the windows a Keyed keeps.
const MaxKeys = 1024

// NewKeyed makes a Keyed limit of burst lines per every for each key.
func NewKeyed(burst int, every time.Duration) *Keyed {
	return &Keyed{burst: burst, every: every, keys: make(map[string]*Window)}
}

// Allow is Window.Allow for key's window at now.
func (k *Keyed) Allow(key string, now time.Time) (ok bool, suppressed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := now.Sub(epoch)
	w := k.keys[key]
	if w == nil {
		if len(k.keys) >= MaxKeys {
			k.pruneLocked(t)
		}
		w = &Window{Burst: k.burst, Every: k.every}
		k.keys[key] = w
	}
	return w.Allow(t)
}

func (k *Keyed) pruneLocked(now time.Duration) {
	for key, w := range k.keys {
		if now-w.start >= w.Every {
			delete(k.keys, key)
		}
	}
	if len(k.keys) >= MaxKeys {
		clear(k.keys)
	}
}
