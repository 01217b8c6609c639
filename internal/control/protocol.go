// Package control is the daemon's control socket: the protocol (one JSON request per line,
// one JSON answer per line, both with a version), the server the daemon runs and the client
// the commands use.
//
// The control socket is a Unix stream socket (unix(7)) on which the daemon answers the
// operator's commands (srptarget status, sessions, luns, stats, reload, acl-check,
// log-level). There is deliberately no TCP form: who may talk to the daemon is decided by the
// socket file's owner, group and mode (0660), as for other system daemons' control sockets,
// and by each client's credentials, which the kernel gives the daemon (Policy).
package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"go.uber.org/zap/zapcore"
)

// DefaultSocket is where serve listens and the commands connect unless told otherwise
// (/run is the FHS place for runtime sockets; systemd's RuntimeDirectory=srptarget makes the
// directory).
const DefaultSocket = "/run/srptarget/control.sock"

// Version is the version of the request and answer format. A daemon answers a request
// of another version with an error, so that an old client never misreads a new answer.
const Version = 1

// Request is one request line.
type Request struct {
	Version   int    `json:"version"`
	Command   string `json:"command"`
	DryRun    bool   `json:"dry_run,omitempty"`
	Initiator string `json:"initiator,omitempty"`
	Source    string `json:"source,omitempty"`
	// ConfigYAML, for a dry-run reload only (validate --diff), is a configuration to plan
	// instead of the daemon's file, named ConfigName in messages. The client sends the text:
	// the daemon reads no file a client names.
	ConfigYAML string `json:"config_yaml,omitempty"`
	ConfigName string `json:"config_name,omitempty"`
	// Level, for log-level, is the level to log at from now on; empty asks which it is.
	Level string `json:"level,omitempty"`
}

// Response is one answer line. OK is false when the request could not be answered at
// all (Error says why); a reload that was refused is answered OK with its errors in Result.
type Response struct {
	Version int             `json:"version"`
	OK      bool            `json:"ok"`
	Error   string          `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
}

// decodeRequest reads one request line: strict JSON, of this Version.
func decodeRequest(line []byte) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("malformed request: %w", err)
	}
	if req.Version != Version {
		return req, fmt.Errorf("protocol version %d is not supported: this daemon speaks version %d", req.Version, Version)
	}
	return req, nil
}

// writeResponse writes one answer line.
func writeResponse(c net.Conn, rsp Response) error {
	b, err := json.Marshal(rsp)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

// controlMaxLine bounds a request line; requests are a few hundred bytes.
const controlMaxLine = 64 << 10

var errLineTooLong = fmt.Errorf("request longer than %d bytes", controlMaxLine)

// readLine reads one line of at most max bytes, without its newline.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > max {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// LogLevels are the levels the daemon logs at: what log-level (and serve --log-level) take.
var LogLevels = []string{"debug", "info", "warn", "error"}

// ParseLogLevel reads one of LogLevels.
func ParseLogLevel(level string) (zapcore.Level, error) {
	l, err := zapcore.ParseLevel(level)
	if err != nil || l < zapcore.DebugLevel || l > zapcore.ErrorLevel {
		return l, fmt.Errorf("--log-level %q: want %s or %s", level,
			strings.Join(LogLevels[:len(LogLevels)-1], ", "), LogLevels[len(LogLevels)-1])
	}
	return l, nil
}
