// Command srptarget is a user-space SCSI RDMA Protocol target daemon.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	stderr := commandStderr()
	root := newRootCommand()
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		var ec exitCodeError
		if errors.As(err, &ec) {
			os.Exit(ec.code)
		}
		fmt.Fprintln(stderr, "srptarget:", err)
		var dial *controlDialError
		if errors.As(err, &dial) {
			os.Exit(exitUnreachable)
		}
		os.Exit(exitFailed)
	}
}

func newRootCommand() *cobra.Command {
	return newRootCommandWith(loginLineDeps{devices: rdmaDevices, interfaces: hostAddrs})
}

// newRootCommandWith builds the command tree with the given RDMA and network seams (tests
// replace them).
func newRootCommandWith(deps loginLineDeps) *cobra.Command {
	root := &cobra.Command{
		Use:           "srptarget",
		Short:         "A user-space SCSI RDMA Protocol (SRP) target",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetVersionTemplate(versionText(build))
	root.AddCommand(
		newServeCommand(),
		newValidateCommand(deps),
		newLoginLineCommand(deps),
		newDevicesCommand(deps),
		newVersionCommand(),
		newGenManCommand(),
	)
	root.AddCommand(newControlCommands()...)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of srptarget: release, commit, Go toolchain, backstores",
		Long: `Print the version of srptarget: the release, the commit it was built from (and whether
the tree had uncommitted changes), the Go toolchain, and the backstores it serves (rbd only
when built with the rbd tag, which links librbd and librados). srptarget --version prints
the same; srptarget status shows the running daemon's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), versionText(build))
			return err
		},
	}
}
