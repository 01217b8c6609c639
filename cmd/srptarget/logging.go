package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/internal/control"
	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// The log formats of serve --log-format.
const (
	// logAuto is journal when stderr is connected to the journal, console otherwise.
	logAuto = "auto"
	// logConsole is zap's development encoder: a time, a level (coloured on a terminal), the
	// message, then the fields as JSON. The daemon is often run by hand on a terminal while an
	// initiator is being set up.
	logConsole = "console"
	// logJSON is one object per line, for log collectors.
	logJSON = "json"
	// logJournal is the console form without the time and the level, which the journal
	// records itself (its own timestamp, and PRIORITY= from the line's <N> prefix).
	logJournal = "journal"
)

// logFormats are the values of --log-format, for its help and shell completion.
var logFormats = []string{logAuto, logConsole, logJSON, logJournal}

// logLevels are the values of --log-level.
var logLevels = control.LogLevels

// newLogger builds the daemon's logger (see newLoggerLevel).
func newLogger(w io.Writer, format, level string) (*zap.Logger, error) {
	log, _, err := newLoggerLevel(w, format, level)
	return log, err
}

// newLoggerLevel builds the daemon's logger writing to w, and the level it logs at, which
// can be changed while it runs. Neither format adds callers or stack traces: the messages say
// what happened and what to change, and a file:line in the engine helps no operator.
//
// When w is the journal's stream (systemd.exec(5), $JOURNAL_STREAM names the device and inode
// of the stream journald gave the service) or the format is journal, each line starts with
// its syslog priority, "<3>" for an error (sd-daemon(3)): journald strips it and records it
// as the entry's PRIORITY=, so that `journalctl -p err` shows the daemon's errors, which it
// would otherwise store at the default priority, info.
func newLoggerLevel(w io.Writer, format, level string) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := parseLogLevel(level)
	if err != nil {
		return nil, lvl, err
	}
	journal := isJournalStream(w)
	if format == logAuto {
		format = logConsole
		if journal {
			format = logJournal
		}
	}
	var enc zapcore.Encoder
	switch format {
	case logConsole, logJournal:
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02 15:04:05.000")
		ec.CallerKey, ec.StacktraceKey = zapcore.OmitKey, zapcore.OmitKey
		if format == logJournal {
			ec.TimeKey, ec.LevelKey = zapcore.OmitKey, zapcore.OmitKey
		} else if f, ok := w.(interface{ Fd() uintptr }); ok && isTerminal(f.Fd()) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	case logJSON:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.CallerKey, ec.StacktraceKey = zapcore.OmitKey, zapcore.OmitKey
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, lvl, fmt.Errorf("--log-format %q: want %s", format, orList(logFormats))
	}
	if journal || format == logJournal {
		enc = priorityEncoder{enc}
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), lvl, nil
}

// parseLogLevel reads a --log-level (or log-level command) value.
func parseLogLevel(level string) (zap.AtomicLevel, error) {
	l, err := control.ParseLogLevel(level)
	if err != nil {
		return zap.NewAtomicLevel(), err
	}
	return zap.NewAtomicLevelAt(l), nil
}

// orList writes "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// isJournalStream reports whether w is the stream journald connected the service's stderr
// to: a file whose device and inode are those $JOURNAL_STREAM names ("DEV:INODE", in
// decimal). A process whose stderr was redirected elsewhere (by a shell the service ran,
// say) inherits the variable with another stream, hence the comparison (systemd.exec(5)).
func isJournalStream(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return strconv.FormatUint(st.Dev, 10) == dev && strconv.FormatUint(st.Ino, 10) == ino
}

// syslogPriority is the syslog(3) priority of a zap level: debug 7, info 6, warn 4 (warning),
// error 3 (err), and 2 (crit) for the panic and fatal levels.
func syslogPriority(l zapcore.Level) int {
	switch {
	case l <= zapcore.DebugLevel:
		return 7
	case l == zapcore.InfoLevel:
		return 6
	case l == zapcore.WarnLevel:
		return 4
	case l == zapcore.ErrorLevel:
		return 3
	}
	return 2
}

// logBuffers are the buffers of priorityEncoder's lines (zap frees them once written).
var logBuffers = buffer.NewPool()

// priorityEncoder prefixes each entry with "<N>", its syslog priority (sd-daemon(3)).
type priorityEncoder struct{ zapcore.Encoder }

func (e priorityEncoder) Clone() zapcore.Encoder { return priorityEncoder{e.Encoder.Clone()} }

func (e priorityEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	// One journal entry per line: a message with a newline would leave its second line at
	// the default priority.
	ent.Message = strings.ReplaceAll(ent.Message, "\n", " ")
	inner, err := e.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return nil, err
	}
	defer inner.Free()
	out := logBuffers.Get()
	out.AppendByte('<')
	out.AppendInt(int64(syslogPriority(ent.Level)))
	out.AppendByte('>')
	_, _ = out.Write(inner.Bytes())
	return out, nil
}

// linePrefixWriter writes prefix at the start of every line written through it: a command's
// stderr under systemd (ExecReload=srptarget reload), whose lines are errors and warnings,
// goes to the journal at priority err ("<3>") instead of info.
type linePrefixWriter struct {
	w       io.Writer
	prefix  string
	midLine bool
}

func (p *linePrefixWriter) Write(b []byte) (int, error) {
	var out []byte
	for _, c := range b {
		if !p.midLine {
			out = append(out, p.prefix...)
		}
		out = append(out, c)
		p.midLine = c != '\n'
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// commandStderr is where the commands write their errors: stderr, with each line at priority
// err when stderr is the journal's stream.
func commandStderr() io.Writer {
	if isJournalStream(os.Stderr) {
		return &linePrefixWriter{w: os.Stderr, prefix: "<3>"}
	}
	return os.Stderr
}
