package daemon

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/internal/accept"
)

// httpEndpoint is one of the daemon's own HTTP servers (`serve --metrics`, `serve --pprof`):
// a handler on a listener with limits, served on a goroutine of its own until close.
type httpEndpoint struct {
	name string // "metrics", "pprof": the start of its log messages
	srv  *http.Server
	ln   *accept.Listener
	addr net.Addr
	done chan struct{}
}

// endpointLimits are the bounds of an endpoint that writes for up to write and holds up to
// conns connections at once. A request is small: its headers within 10 s and 64 KiB, the
// whole of it within 30 s; a keep-alive connection waits 2 minutes for the next.
func endpointLimits(write time.Duration, conns int) accept.HTTPLimits {
	return accept.HTTPLimits{
		ReadHeader:     10 * time.Second,
		Read:           30 * time.Second,
		Write:          write,
		Idle:           2 * time.Minute,
		MaxConns:       conns,
		MaxHeaderBytes: 64 << 10,
	}
}

// serveEndpoint serves h on ln until close and logs the URL of path on it. Whoever reaches a
// port that is not on loopback sees what the endpoint shows, hence the warning exposed unless
// addr, the address asked for, is a loopback address.
func serveEndpoint(name, addr, path, exposed string, ln *accept.Listener, h http.Handler, lim accept.HTTPLimits, log *zap.Logger) *httpEndpoint {
	e := &httpEndpoint{
		name: name,
		srv:  lim.Server(h, log.Named(name)),
		ln:   ln,
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(e.done)
		if err := e.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error(name+" endpoint stopped", zap.Error(err))
		}
	}()
	log.Info(name+" endpoint listening", zap.String("address", e.addr.String()),
		zap.String("url", "http://"+e.addr.String()+path))
	if !isLoopback(addr) {
		log.Warn(exposed, zap.String("address", e.addr.String()))
	}
	return e
}

// close stops listening, closes every connection (a /debug/pprof/profile or trace in
// progress ends with its connection) and waits for the server to stop.
func (e *httpEndpoint) close(log *zap.Logger) {
	_ = e.srv.Close()
	<-e.done
	log.Info(e.name+" endpoint closed", zap.String("address", e.addr.String()))
}

// isLoopback tells whether a listen address "host:port" binds to loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
