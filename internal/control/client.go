package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
)

// Client asks the daemon on the control socket at Path. Each method is one request on a
// connection of its own, bounded by ctx, and returns the result decoded and as the daemon
// encoded it (what --json prints).
type Client struct{ Path string }

// Do sends req and decodes the answer's result into v.
func (c Client) Do(ctx context.Context, req Request, v any) (json.RawMessage, error) {
	raw, err := Call(ctx, c.Path, req)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("control socket %s: malformed %s answer: %w", c.Path, req.Command, err)
	}
	return raw, nil
}

// Status asks what the daemon is and whether it serves.
func (c Client) Status(ctx context.Context) (*StatusInfo, json.RawMessage, error) {
	return do[StatusInfo](ctx, c, Request{Command: "status"})
}

// Sessions lists the logged-in initiators.
func (c Client) Sessions(ctx context.Context) ([]SessionInfo, json.RawMessage, error) {
	ss, raw, err := do[[]SessionInfo](ctx, c, Request{Command: "sessions"})
	return deref(ss), raw, err
}

// LUNs lists the logical units of the running configuration.
func (c Client) LUNs(ctx context.Context) ([]LUNInfo, json.RawMessage, error) {
	ls, raw, err := do[[]LUNInfo](ctx, c, Request{Command: "luns"})
	return deref(ls), raw, err
}

// Stats lists the target's counters.
func (c Client) Stats(ctx context.Context) ([]StatEntry, json.RawMessage, error) {
	es, raw, err := do[[]StatEntry](ctx, c, Request{Command: "stats"})
	return deref(es), raw, err
}

// Reload applies the daemon's configuration file again or, with dryRun, plans it.
func (c Client) Reload(ctx context.Context, dryRun bool) (*ReloadResult, json.RawMessage, error) {
	return do[ReloadResult](ctx, c, Request{Command: "reload", DryRun: dryRun})
}

// PlanReload plans a reload with the configuration text instead of the daemon's file (name
// is its name in messages): validate --diff.
func (c Client) PlanReload(ctx context.Context, name string, text []byte) (*ReloadResult, json.RawMessage, error) {
	return do[ReloadResult](ctx, c, Request{Command: "reload", DryRun: true, ConfigYAML: string(text), ConfigName: name})
}

// ACLCheck asks which ACL admits an initiator (from source, when not empty).
func (c Client) ACLCheck(ctx context.Context, initiator, source string) (*ACLCheckResult, json.RawMessage, error) {
	return do[ACLCheckResult](ctx, c, Request{Command: "acl-check", Initiator: initiator, Source: source})
}

// LogLevel asks the level the daemon logs at or, with level set, changes it.
func (c Client) LogLevel(ctx context.Context, level string) (*LogLevelResult, json.RawMessage, error) {
	return do[LogLevelResult](ctx, c, Request{Command: "log-level", Level: level})
}

func do[T any](ctx context.Context, c Client, req Request) (*T, json.RawMessage, error) {
	v := new(T)
	raw, err := c.Do(ctx, req, v)
	if err != nil {
		return nil, nil, err
	}
	return v, raw, nil
}

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// Call sends one request to the daemon at path and returns its answer's result.
func Call(ctx context.Context, path string, req Request) (json.RawMessage, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, &DialError{path: path, err: err}
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return Exchange(c, path, req)
}

// Exchange sends req on c, connected to the daemon at path, and returns its answer's
// result.
func Exchange(c net.Conn, path string, req Request) (json.RawMessage, error) {
	req.Version = Version
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// A daemon that refuses the connection says why and closes it, perhaps before the request
	// is written: its answer is read even when the write failed.
	_, werr := c.Write(append(b, '\n'))
	line, err := readLine(bufio.NewReader(c), 64<<20)
	switch {
	case err != nil && werr != nil:
		return nil, fmt.Errorf("control socket %s: sending the request: %w", path, werr)
	case err != nil:
		return nil, fmt.Errorf("control socket %s: reading the answer: %w", path, err)
	}
	var rsp Response
	if err := json.Unmarshal(line, &rsp); err != nil {
		return nil, fmt.Errorf("control socket %s: malformed answer: %w", path, err)
	}
	if rsp.Version != Version {
		return nil, fmt.Errorf("control socket %s: the daemon answers with protocol version %d, this srptarget speaks %d: use the srptarget binary of the running daemon", path, rsp.Version, Version)
	}
	if !rsp.OK {
		return nil, fmt.Errorf("the daemon refused the request: %s", rsp.Error)
	}
	return rsp.Result, nil
}

// DialError is a daemon that cannot be reached: not running, or the socket elsewhere or
// not ours to open.
type DialError struct {
	path string
	err  error
}

func (e *DialError) Error() string {
	hint := "is srptarget serve running? (--control PATH if it uses another socket)"
	if errors.Is(e.err, os.ErrPermission) {
		hint = "run as root or as a member of the socket's group (serve --control-group)"
	}
	return fmt.Sprintf("cannot reach the daemon on %s: %v; %s", e.path, e.err, hint)
}

func (e *DialError) Unwrap() error { return e.err }
