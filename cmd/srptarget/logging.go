package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the daemon's logger. "console" is zap's development encoder (a time, a
// coloured level, the message, then the fields as JSON) because the daemon is mostly run by
// hand on a terminal while an initiator is being set up; "json" is one object per line for
// journald and log collectors. Neither adds callers or stack traces: the messages say what
// happened and what to change, and a file:line in the engine helps no operator.
func newLogger(w io.Writer, format, level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil || lvl < zapcore.DebugLevel || lvl > zapcore.ErrorLevel {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	switch format {
	case "console":
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02 15:04:05.000")
		ec.CallerKey, ec.StacktraceKey = zapcore.OmitKey, zapcore.OmitKey
		if f, ok := w.(interface{ Fd() uintptr }); ok && isTerminal(f.Fd()) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	case "json":
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.CallerKey, ec.StacktraceKey = zapcore.OmitKey, zapcore.OmitKey
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, fmt.Errorf("--log-format %q: want console or json", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}
