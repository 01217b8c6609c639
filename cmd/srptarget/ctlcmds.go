package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/config"
)

// controlTimeout bounds one command's exchange with the daemon. A reload opens backstores,
// which may take a while on a busy host.
const controlTimeout = 2 * time.Minute

// controlFlags are the flags every command that talks to the daemon has.
type controlFlags struct {
	path   string
	asJSON bool
}

func (f *controlFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "control", DefaultControlSocket, "the daemon's control socket (serve --control)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the daemon's answer as JSON ({\"version\", \"ok\", \"result\"})")
	controlSocketFlag(cmd)
}

// call asks the daemon and decodes the result into v; with --json it prints the answer as
// the daemon gave it instead of leaving v to the text form, and returns printed true.
func (f *controlFlags) call(cmd *cobra.Command, req controlRequest, v any) (printed bool, err error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), controlTimeout)
	defer cancel()
	res, err := controlCall(ctx, f.path, req)
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(res, v); err != nil {
		return false, fmt.Errorf("control socket %s: malformed %s answer: %w", f.path, req.Command, err)
	}
	if f.asJSON {
		return true, printJSONAnswer(cmd.OutOrStdout(), res)
	}
	return false, nil
}

// printJSONResult prints v in the envelope of the control socket's answers, indented: what
// --json prints for commands that answer without the daemon too.
func printJSONResult(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSONAnswer(w, b)
}

// printJSONAnswer prints a result as the control socket answers it, indented.
func printJSONAnswer(w io.Writer, result json.RawMessage) error {
	b, err := json.MarshalIndent(controlResponse{Version: controlVersion, OK: true, Result: result}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
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

func newStatusCommand() *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running daemon: version, uptime, identity, listeners, devices, buffer pool, load",
		Long: `Show the running daemon: its version, uptime, configuration file, target identity, each
listener (listening, or waiting for an RDMA device with its address), the RDMA devices, the
buffer pool and the load.

Exit status: 0 when the daemon serves (a listener listens); 4 when it runs but serves nothing
yet (every listener waits for an RDMA device); 3 when no daemon answers on the control
socket; 1 for any other failure. A monitoring check can use it as it is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st statusInfo
			done, err := f.call(cmd, controlRequest{Command: "status"}, &st)
			if err != nil {
				return err
			}
			if !done {
				if _, err := io.WriteString(cmd.OutOrStdout(), statusText(&st)); err != nil {
					return err
				}
			}
			if st.State != "serving" {
				return exitCodeError{exitNotServing}
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func statusText(st *statusInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "srptarget %s, pid %d, up %v (since %s)\n", st.Version, st.PID,
		time.Duration(st.UptimeSeconds)*time.Second, st.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "config: %s\n", st.Config)
	if st.State != "" && st.State != "serving" {
		fmt.Fprintf(&b, "state: %s\n", st.State)
	}
	if st.IDExt == "" {
		// Nothing more is known before the daemon has its target identity.
		if len(st.Listeners) > 0 {
			b.WriteString("listeners:\n")
		}
		for _, l := range st.Listeners {
			fmt.Fprintf(&b, "  %s: %s\n", l.Address, l.State)
		}
		fmt.Fprintf(&b, "RDMA devices: %s\n", statusDevicesText(st))
		return b.String()
	}
	fmt.Fprintf(&b, "target: id_ext=%s ioc_guid=%s (from the %s)\n", st.IDExt, st.IOCGUID, st.IdentityFrom)
	b.WriteString("listeners:\n")
	for _, l := range st.Listeners {
		fmt.Fprintf(&b, "  %s: %s\n", l.Address, l.State)
	}
	fmt.Fprintf(&b, "RDMA devices: %s\n", statusDevicesText(st))
	fmt.Fprintf(&b, "buffer pool: %s in use of %s\n", humanBytes(st.BufferPoolInUse), humanBytes(st.BufferPoolSize))
	fmt.Fprintf(&b, "sessions: %d, channels: %d, commands in flight: %d\n", st.Sessions, st.Channels, st.CommandsInFlight)
	return b.String()
}

// statusDevicesText is the RDMA devices line of status.
func statusDevicesText(st *statusInfo) string {
	switch {
	case st.DevicesError != "":
		return "unknown (" + st.DevicesError + ")"
	case len(st.Devices) == 0:
		return "none"
	}
	return strings.Join(st.Devices, ", ")
}

func newSessionsCommand() *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use:   "sessions [INITIATOR...]",
		Short: "List the logged-in initiators: sources, ACL, LUNs, channels (QP numbers, credits, commands in flight)",
		Long: `List the logged-in initiators: their source addresses, the ACL that admitted them, their
LUNs and their channels (QP numbers, credits, commands in flight). With initiator port
identifiers (0x and 32 hex digits, completed from the daemon's sessions), only those.`,
		ValidArgsFunction: initiatorCompletion(&f),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ss []sessionInfo
			quiet := f
			quiet.asJSON = false
			if _, err := quiet.call(cmd, controlRequest{Command: "sessions"}, &ss); err != nil {
				return err
			}
			if len(args) > 0 {
				ss = slices.DeleteFunc(ss, func(s sessionInfo) bool { return !slices.Contains(args, s.Initiator) })
			}
			if f.asJSON {
				return printJSONResult(cmd.OutOrStdout(), ss)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), sessionsText(ss))
			return err
		},
	}
	f.add(cmd)
	return cmd
}

// lunList formats LUNs as "0, 1 (read-only)".
func lunList(ls []lunRef) string {
	if len(ls) == 0 {
		return "none"
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = strconv.Itoa(l.LUN)
		if l.ReadOnly {
			parts[i] += " (read-only)"
		}
	}
	return strings.Join(parts, ", ")
}

func aclText(a *aclRef) string {
	if a == nil {
		return "no ACL of the running configuration"
	}
	if a.Name != "" && a.Name != fmt.Sprintf("acls[%d]", a.Index) {
		return fmt.Sprintf("acls[%d] %s (%s)", a.Index, a.Name, a.Description)
	}
	return fmt.Sprintf("acls[%d] (%s)", a.Index, a.Description)
}

func sessionsText(ss []sessionInfo) string {
	if len(ss) == 0 {
		return "no sessions\n"
	}
	now := time.Now()
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "initiator %s from %s, admitted by %s, logged in %s, %d commands in flight\n",
			s.Initiator, strings.Join(s.Sources, ", "), aclText(s.ACL), s.LoginTime.Format(time.RFC3339), s.CommandsInFlight)
		fmt.Fprintf(&b, "  LUNs: %s\n", lunList(s.LUNs))
		fmt.Fprintf(&b, "  I/O: %s\n", ioText(s.IO, now))
		for _, l := range s.LUNIO {
			if l.Commands > 0 {
				fmt.Fprintf(&b, "    LUN %d: %s\n", l.LUN, ioText(l.ioCounts, now))
			}
		}
		for _, c := range s.Channels {
			fmt.Fprintf(&b, "  channel %d: %s, QP %d, credits %d (initiator holds %d), %d commands in flight, logged in %s\n",
				c.ID, c.Source, c.QPNum, c.Credits, c.CreditsHeld, c.CommandsInFlight, c.LoginTime.Format(time.RFC3339))
		}
	}
	return b.String()
}

func newLUNsCommand() *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use:   "luns [LUN...]",
		Short: "List the LUNs: backstore, size, block size, flags, the sessions using each, persistent reservations",
		Long: `List the LUNs of the running configuration: backstore, size, block size, flags, the
sessions using each, persistent reservations. With LUN numbers (completed from the daemon),
only those.`,
		ValidArgsFunction: lunCompletion(&f),
		Args: func(_ *cobra.Command, args []string) error {
			for _, a := range args {
				if n, err := strconv.Atoi(a); err != nil || n < 0 {
					return fmt.Errorf("LUN %q: want a LUN number", a)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var ls []lunInfo
			quiet := f
			quiet.asJSON = false
			if _, err := quiet.call(cmd, controlRequest{Command: "luns"}, &ls); err != nil {
				return err
			}
			if len(args) > 0 {
				ls = slices.DeleteFunc(ls, func(l lunInfo) bool { return !slices.Contains(args, strconv.Itoa(l.LUN)) })
			}
			if f.asJSON {
				return printJSONResult(cmd.OutOrStdout(), ls)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), lunsText(ls))
			return err
		},
	}
	f.add(cmd)
	return cmd
}

func lunsText(ls []lunInfo) string {
	if len(ls) == 0 {
		return "no LUNs\n"
	}
	now := time.Now()
	var b strings.Builder
	for _, l := range ls {
		store := l.Backstore
		if l.Path != "" {
			store += " " + l.Path
		}
		flags := []string{}
		if l.ReadOnly {
			flags = append(flags, "read-only")
		}
		if l.WriteCache {
			flags = append(flags, "write cache")
		}
		if l.ThinProvisioning {
			flags = append(flags, "thin")
		}
		serial := l.Serial
		if serial == "" {
			serial = "from the first RDMA device's node GUID (none yet)"
		}
		fmt.Fprintf(&b, "LUN %d: %s, %s, %d-byte blocks, serial %s", l.LUN, store, humanBytes(int64(l.Size)), l.BlockSize, serial)
		if len(flags) > 0 {
			fmt.Fprintf(&b, ", %s", strings.Join(flags, ", "))
		}
		b.WriteByte('\n')
		if len(l.Sessions) == 0 {
			b.WriteString("  used by no session\n")
		} else {
			fmt.Fprintf(&b, "  used by %s\n", strings.Join(l.Sessions, ", "))
		}
		fmt.Fprintf(&b, "  I/O: %s\n", ioText(l.IO, now))
		for _, i := range l.Initiators {
			fmt.Fprintf(&b, "    %s (%s): %s\n", i.Initiator, i.ACL, ioText(i.ioCounts, now))
		}
		if r := l.Reservations; r != nil {
			shared := ""
			if r.Store != "" {
				shared = fmt.Sprintf(", shared through RADOS (version %d, current)", r.Version)
				if r.Stale {
					shared = fmt.Sprintf(", shared through RADOS (version %d, NOT known current: commands fail until it is)", r.Version)
				}
			}
			fmt.Fprintf(&b, "  persistent reservation: %s, generation %d%s\n", prTypeName(r.Type), r.Generation, shared)
			for _, g := range r.Registrations {
				holder := ""
				if g.Holder && r.Type != 0 {
					holder = ", holder"
				}
				fmt.Fprintf(&b, "    key %s: %s via port %d%s\n", g.Key, g.Initiator, g.RelativePort, holder)
			}
		}
	}
	return b.String()
}

func newStatsCommand() *cobra.Command {
	var f controlFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Print the target's counters: logins, channels, commands, bytes, errors, buffer use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var es []statEntry
			if done, err := f.call(cmd, controlRequest{Command: "stats"}, &es); done || err != nil {
				return err
			}
			_, err := io.WriteString(cmd.OutOrStdout(), statsText(es))
			return err
		},
	}
	f.add(cmd)
	return cmd
}

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
			var res reloadResult
			done, err := f.call(cmd, controlRequest{Command: "reload", DryRun: dryRun}, &res)
			if err != nil {
				return err
			}
			if !done {
				_, _ = io.WriteString(cmd.OutOrStdout(), reloadText(&res))
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
				return exitCodeError{1}
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
// disruptive (reloadResult.disruptive), shows it and asks. It reports whether to go on: true
// also when nothing needs asking, or when the dry run is refused (the reload then says why).
func confirmReload(cmd *cobra.Command, f *controlFlags) (bool, error) {
	var preview reloadResult
	quiet := *f
	quiet.asJSON = false
	if _, err := quiet.call(cmd, controlRequest{Command: "reload", DryRun: true}, &preview); err != nil {
		return false, err
	}
	if len(preview.Errors) > 0 || !preview.disruptive() {
		return true, nil
	}
	text := strings.Replace(reloadText(&preview), "dry run: nothing applied; the reload would change:", "the reload would change:", 1)
	fmt.Fprint(cmd.ErrOrStderr(), text)
	fmt.Fprint(cmd.ErrOrStderr(), "This reload disconnects initiators, takes LUNs away or loses data. Apply it? [y/N] ")
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	fmt.Fprintln(cmd.ErrOrStderr(), "nothing applied (srptarget reload --yes applies without asking)")
	return false, exitCodeError{exitFailed}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func intsText(ns []int) string {
	if len(ns) == 0 {
		return "none"
	}
	return strings.Trim(config.FlowList(ns), "[]")
}

func reloadText(r *reloadResult) string {
	var b strings.Builder
	switch {
	case len(r.Errors) > 0:
		return ""
	case r.Waiting:
		b.WriteString("the configuration is valid; the daemon waits for an RDMA device and starts with it when one appears\n")
		b.WriteString(pathsNotCheckedText(r))
		return b.String()
	case r.DryRun:
		b.WriteString("dry run: nothing applied; the reload would change:\n")
	default:
		b.WriteString("reload applied:\n")
	}
	b.WriteString(pathsNotCheckedText(r))
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	for _, w := range r.DataLoss {
		fmt.Fprintf(&b, "warning: data lost: %s\n", w)
	}
	fmt.Fprintf(&b, "  LUNs added: %s\n", intsText(r.LUNsAdded))
	fmt.Fprintf(&b, "  LUNs changed: %s\n", intsText(r.LUNsChanged))
	fmt.Fprintf(&b, "  LUNs retired: %s\n", intsText(r.LUNsRemoved))
	fmt.Fprintf(&b, "  LUNs unchanged: %s\n", intsText(r.LUNsUnchanged))
	settingsText(&b, r)
	listeners := func(as []string) string {
		if len(as) == 0 {
			return "none"
		}
		return strings.Join(as, ", ")
	}
	fmt.Fprintf(&b, "  listeners added: %s\n", listeners(r.ListenersAdded))
	fmt.Fprintf(&b, "  listeners removed: %s\n", listeners(r.ListenersRemoved))
	if len(r.PortGroupsChanged) == 0 {
		b.WriteString("  target port groups: unchanged\n")
	}
	for _, g := range r.PortGroupsChanged {
		fmt.Fprintf(&b, "  target port %s\n", g)
	}
	if len(r.Sessions) == 0 {
		b.WriteString("  sessions: none affected\n")
	}
	for _, s := range r.Sessions {
		var what []string
		if s.Disconnected {
			what = append(what, "disconnected (no ACL admits it)")
		} else if s.ChannelsDisconnected > 0 {
			what = append(what, fmt.Sprintf("%d %s disconnected (their sources are granted other LUNs)", s.ChannelsDisconnected, plural(s.ChannelsDisconnected, "channel")))
		}
		if len(s.LosesLUNs) > 0 {
			what = append(what, "loses LUNs "+intsText(s.LosesLUNs))
		}
		if len(s.ChangedLUNs) > 0 {
			what = append(what, "LUNs "+intsText(s.ChangedLUNs)+" replaced by changed ones")
		}
		if len(s.GainsLUNs) > 0 {
			what = append(what, "gains LUNs "+intsText(s.GainsLUNs))
		}
		fmt.Fprintf(&b, "  initiator %s: %s\n", s.Initiator, strings.Join(what, ", "))
	}
	return b.String()
}

// pathsNotCheckedText says that a dry run of a configuration sent to the daemon looked at its
// text only.
func pathsNotCheckedText(r *reloadResult) string {
	if !r.PathsNotChecked {
		return ""
	}
	return "paths not checked: the daemon opens no backstore and looks at no path of a configuration sent by a user other than root or its own; validate checked them as you\n"
}

func newACLCheckCommand() *cobra.Command {
	var f controlFlags
	var initiator, source, configFile string
	cmd := &cobra.Command{
		Use:   "acl-check",
		Short: "Show which ACL admits an initiator and which LUNs it sees",
		Long: `Show which ACL admits an initiator (and, with --source, its address) and which LUNs it
would see. The running daemon is asked; when no daemon answers on the control socket and
--config is given, the configuration file is read instead (the output says which). Exit status
1 when no ACL admits the initiator.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := controlRequest{Command: "acl-check", Initiator: initiator, Source: source}
			var res *aclCheckResult
			ctx, cancel := context.WithTimeout(cmd.Context(), controlTimeout)
			defer cancel()
			raw, err := controlCall(ctx, f.path, req)
			var dialErr *controlDialError
			switch {
			case errors.As(err, &dialErr) && configFile != "":
				if res, err = aclCheckFile(configFile, initiator, source); err != nil {
					config.WriteErrors(cmd.ErrOrStderr(), configFile, err)
					return exitCodeError{1}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no daemon answers on %s: answering from %s\n", f.path, configFile)
				if raw, err = json.Marshal(res); err != nil {
					return err
				}
			case err != nil:
				return err
			default:
				res = &aclCheckResult{}
				if err := json.Unmarshal(raw, res); err != nil {
					return fmt.Errorf("control socket %s: malformed acl-check answer: %w", f.path, err)
				}
			}
			if f.asJSON {
				if err := printJSONAnswer(cmd.OutOrStdout(), raw); err != nil {
					return err
				}
			} else if _, err := io.WriteString(cmd.OutOrStdout(), aclCheckText(res, f.path)); err != nil {
				return err
			}
			if res.ACL == nil {
				return exitCodeError{1}
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&initiator, "initiator", "", "initiator port identifier, 0x and 32 hex digits as the log prints it")
	cmd.Flags().StringVar(&source, "source", "", "the initiator's source address (IP), or gid:GID[,pkey:HEX] for a login through an ib listener, for ACLs with sources")
	cmd.Flags().StringVar(&configFile, "config", "", "configuration file to read when no daemon answers")
	_ = cmd.MarkFlagRequired("initiator")
	_ = cmd.RegisterFlagCompletionFunc("initiator", initiatorCompletion(&f))
	configFileFlag(cmd)
	return cmd
}

func aclCheckText(r *aclCheckResult, path string) string {
	var b strings.Builder
	if r.From == "daemon" {
		fmt.Fprintf(&b, "answered by the daemon on %s (the running configuration)\n", path)
	} else {
		fmt.Fprintf(&b, "answered from %s (no daemon)\n", r.From)
	}
	who := "initiator " + r.Initiator
	if r.Source != "" {
		who += " from " + r.Source
	}
	if r.ACL == nil {
		fmt.Fprintf(&b, "%s: no ACL admits it, its logins are refused\n%s\n", who, r.Refusal)
		return b.String()
	}
	fmt.Fprintf(&b, "%s: admitted by %s\n", who, aclText(r.ACL))
	fmt.Fprintf(&b, "LUNs: %s\n", lunList(r.LUNs))
	return b.String()
}
