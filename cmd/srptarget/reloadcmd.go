package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// srptarget reload, and how a reload's result is printed (reload, validate --diff).

func newReloadCommand() *cobra.Command {
	var f controlFlags
	var dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Ask the daemon to reload its configuration file (as SIGHUP) and print the outcome",
		Long: `Ask the daemon to reload its configuration file, as SIGHUP does, and print what changed.
Exit status 0: the new configuration runs. Exit status 1: the reload was refused, the running
configuration is unchanged, and every error is printed with its file and line.

--dry-run plans the reload and applies nothing: it prints the LUNs that would be added,
changed and retired, each changed setting of a LUN or an ACL (size: 16MiB -> 32MiB), the
memory LUNs whose data would be lost (resized or removed: a memory LUN that gets new memory
starts empty), the listeners added and removed, and the logged-in initiators that would
lose or gain LUNs or be disconnected. New backstores are opened to check them, then closed,
without holding up the daemon's other commands; a missing file with create: true is not
created.

On a terminal, a reload that would disconnect an initiator, take LUNs away from one or lose
a memory LUN's data shows that preview first and asks before it applies anything; --yes
(or --force) applies without asking, and declining exits 1 with nothing applied. Without a
terminal (systemctl reload, scripts) it applies as SIGHUP does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !dryRun && !yes && inputIsTerminal(cmd.InOrStdin()) {
				if ok, err := confirmReload(cmd, &f); !ok || err != nil {
					return err
				}
			}
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			res, raw, err := c.Reload(ctx, dryRun)
			if err != nil {
				return err
			}
			if f.asJSON {
				if err := printJSONAnswer(cmd.OutOrStdout(), raw); err != nil {
					return err
				}
			} else {
				_, _ = io.WriteString(cmd.OutOrStdout(), reloadText(res))
				for _, e := range res.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), e)
				}
				if len(res.Errors) > 0 {
					verb := "reload refused"
					if res.DryRun {
						verb = "the reload would be refused"
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d %s; the running configuration is unchanged\n", verb, len(res.Errors), plural(len(res.Errors), "error"))
				}
			}
			if len(res.Errors) > 0 {
				return exitCodeError{Code: 1}
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what the reload would change, and apply nothing")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "apply without asking on a terminal, even when initiators would be disconnected or data lost")
	cmd.Flags().BoolVar(&yes, "force", false, "the same as --yes")
	return cmd
}

// terminalInput is an input that knows whether it is a terminal (the tests' stand-in for one).
type terminalInput interface{ IsTerminal() bool }

// inputIsTerminal reports whether the command reads from a terminal: someone who can answer.
func inputIsTerminal(r io.Reader) bool {
	switch in := r.(type) {
	case terminalInput:
		return in.IsTerminal()
	case *os.File:
		return isTerminal(in.Fd())
	}
	return false
}

// confirmReload asks the daemon for a dry run of the reload and, when applying it would be
// disruptive (control.ReloadResult.disruptive), shows it and asks. It reports whether to go on: true
// also when nothing needs asking, or when the dry run is refused (the reload then says why).
func confirmReload(cmd *cobra.Command, f *controlFlags) (bool, error) {
	c, ctx, cancel := f.client(cmd)
	defer cancel()
	preview, _, err := c.Reload(ctx, true)
	if err != nil {
		return false, err
	}
	if len(preview.Errors) > 0 || !preview.Disruptive() {
		return true, nil
	}
	text := strings.Replace(reloadText(preview), "dry run: nothing applied; the reload would change:", "the reload would change:", 1)
	fmt.Fprint(cmd.ErrOrStderr(), text)
	fmt.Fprint(cmd.ErrOrStderr(), "This reload disconnects initiators, takes LUNs away or loses data. Apply it? [y/N] ")
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "nothing applied (srptarget reload --yes applies without asking)")
	return false, exitCodeError{Code: exitFailed}
}
