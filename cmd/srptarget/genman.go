package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenManCommand is `srptarget gen-man DIR`: the man pages of every command (srptarget(1),
// srptarget-serve(1), ...), generated from the commands' own help so that the pages and
// --help never disagree. `make install` runs it; it is hidden because it is a build step,
// not something an operator runs. The date in the pages is SOURCE_DATE_EPOCH when set
// (reproducible builds), else today.
func newGenManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write the man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("gen-man: %w", err)
			}
			header := &doc.GenManHeader{Section: "1", Source: "srptarget " + version, Manual: "srptarget manual"}
			if err := doc.GenManTree(cmd.Root(), header, dir); err != nil {
				return fmt.Errorf("gen-man: writing the man pages into %s: %w", dir, err)
			}
			return nil
		},
	}
}
