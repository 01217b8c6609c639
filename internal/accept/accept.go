// Package accept accepts connections on the daemon's own sockets (the control socket,
// --metrics, --pprof) so that neither running out of file descriptors nor a crowd of idle
// clients stops it.
package accept

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/lib/loglimit"
)

const (
	// acceptBackoffMin and acceptBackoffMax bound the wait between two accept(2) calls that
	// failed for want of a resource, doubling from one to the other as net/http's Serve does.
	// The connection waits in the listen queue meanwhile; retrying at once would spin.
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	// LogEvery is how often a repeated warning (accept failures, refused connections) is
	// logged at most (lib/loglimit); the lines left out are counted in the next one.
	LogEvery = 10 * time.Second
)

// outOfResources tells the accept(2) errors that pass once something else frees a file
// descriptor or memory (accept(2) ERRORS): the listener is fine, only this attempt failed.
func outOfResources(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Listener is a net.Listener whose Accept outlives a shortage of file descriptors
// (EMFILE, ENFILE) or memory: it waits with a growing backoff and tries again, logs the first
// failure and then at most one line per LogEvery, and logs when it accepts again. With max >
// 0 it also caps the connections open at once: one more is closed as soon as it is accepted
// (and logged, rate-limited), so that idle clients hold at most max descriptors and whoever
// comes after a slot frees gets in. (golang.org/x/net/netutil.LimitListener caps by not
// accepting instead: the clients beyond the cap would wait in the listen queue, unanswered,
// for as long as the others stay.)
type Listener struct {
	net.Listener
	log  *zap.Logger
	what string
	max  int

	open         atomic.Int64
	failLog      *loglimit.Locked
	refuseLog    *loglimit.Locked
	closed       chan struct{}
	closeOnce    sync.Once
	failures     int // accept failures since the last success (Accept's goroutine only)
	failingSince time.Time
}

// NewListener wraps ln; what names it in the log ("control socket", "metrics").
func NewListener(ln net.Listener, what string, max int, log *zap.Logger) *Listener {
	return &Listener{
		Listener:  ln,
		log:       log,
		what:      what,
		max:       max,
		failLog:   loglimit.NewLocked(1, LogEvery),
		refuseLog: loglimit.NewLocked(1, LogEvery),
		closed:    make(chan struct{}),
	}
}

// Accept returns the next connection, or the error that ends the listener (net.ErrClosed
// after Close).
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !outOfResources(err) {
				return nil, err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			l.failed(err, delay)
			select {
			case <-time.After(delay):
				continue
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		delay = 0
		if l.failures > 0 {
			l.log.Info("accepting connections again", zap.String("listener", l.what),
				zap.Int("failed_accepts", l.failures), zap.Duration("after", time.Since(l.failingSince).Round(time.Millisecond)))
			l.failures = 0
		}
		if l.max > 0 && l.open.Load() >= int64(l.max) {
			_ = c.Close()
			if ok, left := l.refuseLog.Allow(); ok {
				l.log.Warn("too many connections: closed a new one at once", zap.String("listener", l.what),
					zap.Int("max", l.max), zap.Int("more_since_last_logged", left))
			}
			continue
		}
		if l.max == 0 {
			return c, nil
		}
		l.open.Add(1)
		return &countedConn{Conn: c, open: &l.open}, nil
	}
}

// failed logs an accept failure, rate-limited.
func (l *Listener) failed(err error, retry time.Duration) {
	if l.failures == 0 {
		l.failingSince = time.Now()
	}
	l.failures++
	if ok, left := l.failLog.Allow(); ok {
		l.log.Warn("accepting a connection failed: retrying (is RLIMIT_NOFILE too low, or does something hold many descriptors?)",
			zap.String("listener", l.what), zap.Error(err), zap.Duration("retry_in", retry),
			zap.Int("more_since_last_logged", left))
	}
}

// Open is how many of its connections are open now (0 without a cap: they are not counted).
func (l *Listener) Open() int64 { return l.open.Load() }

// Close closes the listener and ends a backoff wait of Accept.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// countedConn gives its slot back when closed (once, however often Close is called).
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// HTTPLimits bound what the clients of an HTTP endpoint (--metrics, --pprof) can hold. It has
// no authentication, so whoever reaches its port is a client.
type HTTPLimits struct {
	// ReadHeader bounds the reading of a request's headers, from the connection's start or
	// from the first byte after a keep-alive wait: a client that sends nothing, or a byte now
	// and then, is closed then.
	ReadHeader time.Duration
	// Read bounds the reading of a whole request; Write the writing of its answer (0: no
	// bound, as for pprof, whose profiles take as long as asked).
	Read, Write time.Duration
	// Idle bounds a keep-alive connection's wait for its next request.
	Idle time.Duration
	// MaxConns caps the connections open at once (Listener).
	MaxConns int
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// Server makes the http.Server of an endpoint, logging through log.
func (lim HTTPLimits) Server(h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log),
	}
}

// Listen listens on addr (TCP) behind a Listener capped at MaxConns.
func (lim HTTPLimits) Listen(addr, what string, log *zap.Logger) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewListener(ln, what, lim.MaxConns, log), nil
}
