package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logLevelResult is the answer of log-level: the level the daemon logs at now and, after a
// change, the one before.
type logLevelResult struct {
	Level    string `json:"level"`
	Previous string `json:"previous,omitempty"`
}

// logLevel answers log-level: with level empty it says which level the daemon logs at;
// otherwise it logs at level from now on. Only the logger's level changes: sessions,
// channels and commands go on untouched. The change is logged with who asked, where it is
// seen: after the change when the new level shows info lines, before it otherwise.
func (s *controlServer) logLevel(level string, p peer) (*logLevelResult, error) {
	al := s.opts.level
	if al == nil {
		if level == "" {
			// A logger without an adjustable level (tests): the lowest level it logs.
			return &logLevelResult{Level: zapcore.LevelOf(s.log.Core()).String()}, nil
		}
		return nil, errors.New("this daemon's log level cannot be changed")
	}
	if level == "" {
		return &logLevelResult{Level: al.Level().String()}, nil
	}
	next, err := parseLogLevel(level)
	if err != nil {
		return nil, err
	}
	prev := al.Level()
	to := next.Level()
	logChange := func() {
		s.log.Info("log level changed on the control socket", append(p.fields(),
			zap.Stringer("from", prev), zap.Stringer("to", to))...)
	}
	if to > zapcore.InfoLevel {
		logChange()
	}
	al.SetLevel(to)
	if to <= zapcore.InfoLevel {
		logChange()
	}
	return &logLevelResult{Level: to.String(), Previous: prev.String()}, nil
}

func newLogLevelCommand() *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use:   "log-level [debug|info|warn|error]",
		Short: "Show or change the level the running daemon logs at, without a restart",
		Long: `Show the level the running daemon logs at or, with a level, make it log at that level
from now on: debug, info, warn or error. Only the log changes: sessions, channels and
commands go on. The change is logged with the uid and pid of who asked, and lasts until the
daemon stops (serve --log-level is the level it starts with).

Showing the level needs the read access of the control socket (--control-read-group);
changing it, the access a reload needs (root, the daemon's user, --control-group).`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: logLevels,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := controlRequest{Command: "log-level"}
			if len(args) == 1 {
				if _, err := parseLogLevel(args[0]); err != nil {
					return usageError{fmt.Errorf("log level %q: want %s", args[0], orList(logLevels))}
				}
				req.Level = args[0]
			}
			var res logLevelResult
			if done, err := f.call(cmd, req, &res); done || err != nil {
				return err
			}
			text := fmt.Sprintf("log level: %s\n", res.Level)
			if res.Previous != "" {
				text = fmt.Sprintf("log level: %s (was %s)\n", res.Level, res.Previous)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), text)
			return err
		},
	}
	f.add(cmd)
	return cmd
}
