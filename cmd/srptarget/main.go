// Command srptarget is a user-space SCSI RDMA Protocol target daemon.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

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
		os.Exit(1)
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
	}
	root.AddCommand(
		newServeCommand(),
		newValidateCommand(),
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
		Short: "Print the version of srptarget and of the Go toolchain that built it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
				v = bi.Main.Version
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "srptarget %s (%s, %s/%s)\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
