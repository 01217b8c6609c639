package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fakeBackend answers from fixed values and records the reloads it is asked for.
type fakeBackend struct {
	reloads chan ReloadRequest
}

func (fakeBackend) Status() StatusInfo { return StatusInfo{Version: "test", State: "serving"} }
func (fakeBackend) Sessions() []SessionInfo {
	return []SessionInfo{{Initiator: "0x1", Sources: []string{"192.0.2.1"}}}
}
func (fakeBackend) LUNs() ([]LUNInfo, error) { return nil, errors.New("no LUNs here") }
func (fakeBackend) Stats() []StatEntry       { return []StatEntry{{Name: "commands", Value: 7}} }
func (fakeBackend) ACLCheck(initiator, _ string) (*ACLCheckResult, error) {
	return &ACLCheckResult{From: "daemon", Initiator: initiator}, nil
}
func (b fakeBackend) Reload(r ReloadRequest) (*ReloadResult, error) {
	b.reloads <- r
	return &ReloadResult{DryRun: r.DryRun, Applied: !r.DryRun}, nil
}
func (fakeBackend) LogLevel(level string, log *zap.Logger) (*LogLevelResult, error) {
	log.Info("log level asked")
	return &LogLevelResult{Level: "info", Previous: level}, nil
}

// serveTest serves b on a socket in a fresh directory and returns the socket's path and
// the server's log.
func serveTest(t *testing.T, b Backend) (string, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	ln, err := Listen(path, "", false, log)
	require.NoError(t, err)
	policy, err := NewPolicy("", "")
	require.NoError(t, err)
	s := Serve(ln, path, policy, b, log)
	t.Cleanup(s.Close)
	return path, logs
}

// TestServerProtocol: each request line gets one answer line with the protocol version, the
// errors of a request answered as errors on a connection that goes on answering, and each
// command handed to the backend with what it needs.
func TestServerProtocol(t *testing.T) {
	b := fakeBackend{reloads: make(chan ReloadRequest, 4)}
	path, logs := serveTest(t, b)
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(line string) Response {
		t.Helper()
		_, err := c.Write([]byte(line + "\n"))
		require.NoError(t, err)
		l, err := r.ReadBytes('\n')
		require.NoError(t, err)
		var rsp Response
		require.NoError(t, json.Unmarshal(l, &rsp), string(l))
		require.Equal(t, Version, rsp.Version)
		return rsp
	}
	for _, tt := range []struct{ req, wantErr, wantResult string }{
		{req: `{"version":2,"command":"status"}`, wantErr: "protocol version 2 is not supported: this daemon speaks version 1"},
		{req: `{"version":1,"command":"format-disk"}`, wantErr: `unknown command "format-disk"`},
		{req: `{"version":1,"command":"status","extra":1}`, wantErr: `malformed request: json: unknown field "extra"`},
		{req: `not json`, wantErr: "malformed request: invalid character 'o' in literal null (expecting 'u')"},
		{req: `{"version":1,"command":"luns"}`, wantErr: "no LUNs here"},
		{req: `{"version":1,"command":"reload","config_yaml":"luns: []"}`,
			wantErr: "a configuration sent with the request can only be planned (dry run), not applied: write the file and reload"},
		{req: `{"version":1,"command":"stats"}`, wantResult: `[{"name":"commands","value":7}]`},
		{req: `{"version":1,"command":"acl-check","initiator":"0x2"}`, wantResult: `{"from":"daemon","initiator":"0x2","acl":null,"luns":null}`},
		{req: `{"version":1,"command":"log-level","level":"debug"}`, wantResult: `{"level":"info","previous":"debug"}`},
	} {
		rsp := ask(tt.req)
		require.Equal(t, tt.wantErr, rsp.Error, tt.req)
		require.Equal(t, tt.wantErr == "", rsp.OK, tt.req)
		if tt.wantResult != "" {
			require.JSONEq(t, tt.wantResult, string(rsp.Result), tt.req)
		}
	}
	require.Empty(t, b.reloads, "a refused request reaches no backend")
	rsp := ask(`{"version":1,"command":"reload","dry_run":true,"config_yaml":"luns: []","config_name":"new.yaml"}`)
	require.True(t, rsp.OK, rsp.Error)
	got := <-b.reloads
	require.True(t, got.DryRun)
	require.Equal(t, []byte("luns: []"), got.Config)
	require.Equal(t, "new.yaml", got.ConfigName)
	require.True(t, got.Trusted, "the test runs as the daemon's own user")
	require.NotNil(t, got.Closing)
	// Who reloads (or asks to, the refused request included) and who changes the level is
	// logged, with the client's credentials.
	require.Equal(t, 2, logs.FilterMessage("reload requested on the control socket").Len())
	asked := logs.FilterMessage("log level asked").All()
	require.Len(t, asked, 1)
	require.EqualValues(t, os.Getpid(), asked[0].ContextMap()["pid"])
	require.Equal(t, path, asked[0].ContextMap()["control"])
}

// TestClientTypedAnswers: the client's methods decode what the daemon answers and keep the
// answer as it came (for --json); a socket nobody answers on is a DialError.
func TestClientTypedAnswers(t *testing.T) {
	path, _ := serveTest(t, fakeBackend{reloads: make(chan ReloadRequest, 1)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := Client{Path: path}
	st, raw, err := c.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, "test", st.Version)
	require.Contains(t, string(raw), `"state":"serving"`)
	ss, _, err := c.Sessions(ctx)
	require.NoError(t, err)
	require.Equal(t, []SessionInfo{{Initiator: "0x1", Sources: []string{"192.0.2.1"}}}, ss)
	res, _, err := c.Reload(ctx, false)
	require.NoError(t, err)
	require.True(t, res.Applied)
	_, _, err = c.LUNs(ctx)
	require.EqualError(t, err, "the daemon refused the request: no LUNs here")

	_, _, err = Client{Path: filepath.Join(t.TempDir(), "none.sock")}.Status(ctx)
	var dial *DialError
	require.ErrorAs(t, err, &dial)
	require.ErrorContains(t, err, "is srptarget serve running?")
}

// TestControlIdleConnectionsDoNotLockOut: clients that connect and send nothing, twice as many
// as the daemon serves at once, do not keep the operator's status out: a new connection takes
// the place of the one idle longest (one line logged).
func TestControlIdleConnectionsDoNotLockOut(t *testing.T) {
	path, logs := serveTest(t, fakeBackend{})
	for range 2 * controlMaxConns {
		c, err := net.Dial("unix", path)
		require.NoError(t, err)
		defer c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		st, _, err := Client{Path: path}.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, "test", st.Version)
	}
	require.Equal(t, 1, logs.FilterMessage("control socket: every connection in use; closed the one idle longest to admit a new one").Len())
	require.Zero(t, logs.FilterMessage("control socket: connection refused").Len())
}
