// Command srptarget is a user-space SCSI RDMA Protocol target daemon.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/internal/daemon"
)

func main() {
	stderr := commandStderr()
	root := newRootCommand()
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return
	}
	var ec exitCodeError
	if !errors.As(err, &ec) {
		// An exitCodeError has said why already.
		fmt.Fprintln(stderr, "srptarget:", err)
	}
	if exitStatus(err) == exitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	os.Exit(exitStatus(err))
}

func newRootCommand() *cobra.Command {
	return newRootCommandWith(loginLineDeps{devices: daemon.RDMADevices, interfaces: daemon.HostAddrs})
}

// newRootCommandWith builds the command tree with the given RDMA and network seams (tests
// replace them).
func newRootCommandWith(deps loginLineDeps) *cobra.Command {
	root := &cobra.Command{
		Use:   "srptarget",
		Short: "A user-space SCSI RDMA Protocol (SRP) target",
		Long: `A user-space SCSI RDMA Protocol (SRP) target: serve runs it, the other commands check its
configuration or ask the running daemon on its control socket.

Exit status of every command: 0 done (status: serving); 1 failed or refused (a configuration
with errors, an initiator no ACL admits, a reload declined); 2 the command line is wrong; 3 no
daemon answers on the control socket; 4 (status) the daemon runs but serves nothing yet.`,
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
		newDMAgentCommand(deps),
		newIBDiscoverCommand(),
		newVersionCommand(),
		newGenManCommand(),
	)
	root.AddCommand(newControlCommands()...)
	markUsageErrors(root)
	return root
}

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of srptarget: release, commit, Go toolchain, backstores",
		Long: `Print the version of srptarget: the release, the commit it was built from (and whether
the tree had uncommitted changes), the Go toolchain, and the backstores it serves (rbd only
when built with the rbd tag, which links librbd and librados). srptarget --version prints
the same; srptarget status shows the running daemon's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printResult(cmd, asJSON, build, func() string { return versionText(build) })
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as JSON ({\"version\", \"ok\", \"result\"}, the result as status --json's build object)")
	return cmd
}

// newControlCommands are the commands that talk to a running daemon.
func newControlCommands() []*cobra.Command {
	return []*cobra.Command{
		newStatusCommand(),
		newSessionsCommand(),
		newLUNsCommand(),
		newStatsCommand(),
		newReloadCommand(),
		newACLCheckCommand(),
		newLogLevelCommand(),
	}
}
