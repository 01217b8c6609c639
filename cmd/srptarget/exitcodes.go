package main

import (
	"errors"

	"github.com/spf13/cobra"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
)

// The exit statuses of srptarget's commands, for scripts and monitoring (README.md,
// "Operating"; each command's help). A second signal to serve exits 128 + its number.
const (
	// exitOK: done; for status, the daemon serves (a listener listens).
	exitOK = 0
	// exitFailed: the command failed or was refused: a configuration with errors (validate,
	// reload, serve's start), an initiator no ACL admits (acl-check), a reload that would
	// disconnect initiators without --yes.
	exitFailed = 1
	// exitUsage: the command line is wrong: an unknown command or flag, a flag's value that
	// is not one of its values, a missing required flag, arguments a command does not take
	// (as sysexits' EX_USAGE, 64, is for programs that follow it; 2 is what getopt-based
	// tools and shells use).
	exitUsage = 2
	// exitUnreachable: no daemon answers on the control socket (not running, another
	// --control, or no permission to open it).
	exitUnreachable = 3
	// exitNotServing: status: the daemon runs but serves nothing yet: every listener waits
	// for an RDMA device with its address.
	exitNotServing = 4
)

// exitCodeError makes main exit with its code without printing anything more (serve's
// failures are logged; the commands print theirs).
type exitCodeError = daemon.ExitError

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitStatus is the exit status of a command that returned err.
func exitStatus(err error) int {
	var ec exitCodeError
	var usage usageError
	var dial *control.DialError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.Code
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &dial):
		return exitUnreachable
	}
	return exitFailed
}

// markUsageErrors makes cobra's own command-line errors usage errors: bad flags and flag
// values (FlagErrorFunc, which subcommands inherit), arguments a command does not take, an
// unknown command (the root takes no arguments: cobra then says "unknown command"), and
// required flags that are missing (checked with the arguments, before cobra checks them
// itself and returns a plain error).
func markUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if root.Args == nil {
		root.Args = cobra.NoArgs
		// A command that cannot run prints its help before its arguments are checked:
		// running, the root checks them first.
		root.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				if err := args(c, a); err != nil {
					return usageError{err}
				}
				if err := c.ValidateRequiredFlags(); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
