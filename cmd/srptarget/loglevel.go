package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

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
			level := ""
			if len(args) == 1 {
				if _, err := parseLogLevel(args[0]); err != nil {
					return usageError{fmt.Errorf("log level %q: want %s", args[0], orList(logLevels))}
				}
				level = args[0]
			}
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			res, raw, err := c.LogLevel(ctx, level)
			if err != nil {
				return err
			}
			return f.print(cmd, raw, func() string {
				if res.Previous != "" {
					return fmt.Sprintf("log level: %s (was %s)\n", res.Level, res.Previous)
				}
				return fmt.Sprintf("log level: %s\n", res.Level)
			})
		},
	}
	f.add(cmd)
	return cmd
}
