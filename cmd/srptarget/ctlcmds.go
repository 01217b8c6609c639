package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
)

// printSelected prints the entries whose key is among names, all of them without names: with
// --json in the envelope of the control socket's answers, otherwise as text.
func printSelected[T any](cmd *cobra.Command, f *controlFlags, entries []T, names []string, key func(T) string, text func([]T) string) error {
	if len(names) > 0 {
		entries = slices.DeleteFunc(entries, func(e T) bool { return !slices.Contains(names, key(e)) })
	}
	return printResult(cmd, f.asJSON, entries, func() string { return text(entries) })
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
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			st, raw, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if err := f.print(cmd, raw, func() string { return statusText(st) }); err != nil {
				return err
			}
			if st.State != "serving" {
				return exitCodeError{Code: exitNotServing}
			}
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func statusText(st *control.StatusInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "srptarget %s, pid %d, up %v (since %s)\n", st.Version, st.PID,
		time.Duration(st.UptimeSeconds)*time.Second, st.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "config: %s\n", st.Config)
	if st.BackstoreIO != "" {
		fmt.Fprintf(&b, "backstore I/O: %s", st.BackstoreIO)
		if st.BackstoreIONote != "" {
			fmt.Fprintf(&b, " (%s)", st.BackstoreIONote)
		}
		b.WriteString("\n")
	}
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
	fmt.Fprintf(&b, "buffer pool: %s in use of %s\n", daemon.HumanBytes(st.BufferPoolInUse), daemon.HumanBytes(st.BufferPoolSize))
	fmt.Fprintf(&b, "sessions: %d, channels: %d, commands in flight: %d\n", st.Sessions, st.Channels, st.CommandsInFlight)
	return b.String()
}

// statusDevicesText is the RDMA devices line of status.
func statusDevicesText(st *control.StatusInfo) string {
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
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			ss, _, err := c.Sessions(ctx)
			if err != nil {
				return err
			}
			return printSelected(cmd, &f, ss, args, func(s control.SessionInfo) string { return s.Initiator }, sessionsText)
		},
	}
	f.add(cmd)
	return cmd
}

// lunList formats LUNs as "0, 1 (read-only)".
func lunList(ls []control.LUNRef) string {
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

func aclText(a *control.ACLRef) string {
	if a == nil {
		return "no ACL of the running configuration"
	}
	if a.Name != "" && a.Name != fmt.Sprintf("acls[%d]", a.Index) {
		return fmt.Sprintf("acls[%d] %s (%s)", a.Index, a.Name, a.Description)
	}
	return fmt.Sprintf("acls[%d] (%s)", a.Index, a.Description)
}

func sessionsText(ss []control.SessionInfo) string {
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
				fmt.Fprintf(&b, "    LUN %d: %s\n", l.LUN, ioText(l.IOCounts, now))
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
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			ls, _, err := c.LUNs(ctx)
			if err != nil {
				return err
			}
			return printSelected(cmd, &f, ls, args, func(l control.LUNInfo) string { return strconv.Itoa(l.LUN) }, lunsText)
		},
	}
	f.add(cmd)
	return cmd
}

func lunsText(ls []control.LUNInfo) string {
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
		fmt.Fprintf(&b, "LUN %d: %s, %s, %d-byte blocks, serial %s", l.LUN, store, daemon.HumanBytes(int64(l.Size)), l.BlockSize, serial)
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
			fmt.Fprintf(&b, "    %s (%s): %s\n", i.Initiator, i.ACL, ioText(i.IOCounts, now))
		}
		if r := l.Reservations; r != nil {
			shared := ""
			if r.Store != "" {
				shared = fmt.Sprintf(", shared through RADOS (version %d, current)", r.Version)
				if r.Stale {
					shared = fmt.Sprintf(", shared through RADOS (version %d, NOT known current: commands fail until it is)", r.Version)
				}
			}
			fmt.Fprintf(&b, "  persistent reservation: %s, generation %d%s\n", daemon.PRTypeName(r.Type), r.Generation, shared)
			for _, g := range r.Registrations {
				holder := ""
				if g.Holder && r.Type != 0 {
					holder = ", holder"
				}
				fmt.Fprintf(&b, "    key %s: %s via port %d%s\n", g.Key, g.Initiator, g.RelativePort, holder)
			}
			if len(r.ALUA) > 0 {
				var gs []string
				for _, g := range r.ALUA {
					gs = append(gs, fmt.Sprintf("group %d %s", g.Group, g.State))
				}
				fmt.Fprintf(&b, "  ALUA states set by SET TARGET PORT GROUPS, for every gateway: %s\n", strings.Join(gs, ", "))
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
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			es, raw, err := c.Stats(ctx)
			if err != nil {
				return err
			}
			return f.print(cmd, raw, func() string { return statsText(es) })
		},
	}
	f.add(cmd)
	return cmd
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
			c, ctx, cancel := f.client(cmd)
			defer cancel()
			res, raw, err := c.ACLCheck(ctx, initiator, source)
			var dialErr *control.DialError
			switch {
			case errors.As(err, &dialErr) && configFile != "":
				if res, err = daemon.ACLCheckFile(configFile, initiator, source); err != nil {
					config.WriteErrors(cmd.ErrOrStderr(), configFile, err)
					return exitCodeError{Code: 1}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "no daemon answers on %s: answering from %s\n", f.path, configFile)
				if raw, err = json.Marshal(res); err != nil {
					return err
				}
			case err != nil:
				return err
			}
			if f.asJSON {
				if err := printJSONAnswer(cmd.OutOrStdout(), raw); err != nil {
					return err
				}
			} else if _, err := io.WriteString(cmd.OutOrStdout(), aclCheckText(res, f.path)); err != nil {
				return err
			}
			if res.ACL == nil {
				return exitCodeError{Code: 1}
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

func aclCheckText(r *control.ACLCheckResult, path string) string {
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

// ioText is a line of counters for people: "16316 commands, 63.8 MiB read, ...".
func ioText(c control.IOCounts, now time.Time) string {
	last := "never active"
	if c.LastActive != nil {
		last = fmt.Sprintf("last active %s (%s ago)", c.LastActive.Format(time.RFC3339), now.Sub(*c.LastActive).Round(time.Second))
	}
	return fmt.Sprintf("%d %s, %s read, %s written, %d %s, %s", c.Commands, plural(int(c.Commands), "command"), daemon.HumanBytes(int64(c.ReadBytes)),
		daemon.HumanBytes(int64(c.WrittenBytes)), c.Errors, plural(int(c.Errors), "error"), last)
}

// statsText is stats for people: the target's counters in one column, then a line per
// session.
func statsText(es []control.StatEntry) string {
	var b strings.Builder
	width := 0
	for _, e := range es {
		if e.Initiator == "" {
			width = max(width, len(e.Name))
		}
	}
	type session struct {
		who, acl string
		v        map[string]int64
	}
	var sessions []*session
	for _, e := range es {
		if e.Initiator == "" {
			fmt.Fprintf(&b, "%-*s %d\n", width, e.Name, e.Value)
			continue
		}
		if len(sessions) == 0 || sessions[len(sessions)-1].who != e.Initiator {
			sessions = append(sessions, &session{who: e.Initiator, acl: e.ACL, v: map[string]int64{}})
		}
		sessions[len(sessions)-1].v[e.Name] = e.Value
	}
	if len(sessions) > 0 {
		b.WriteString("per initiator (bytes read: sent to it; written: received from it):\n")
	}
	now := time.Now()
	for _, s := range sessions {
		c := control.IOCounts{Commands: uint64(s.v["initiator_commands"]), ReadBytes: uint64(s.v["initiator_read_bytes"]),
			WrittenBytes: uint64(s.v["initiator_written_bytes"]), Errors: uint64(s.v["initiator_errors"])}
		if t := s.v["initiator_last_active"]; t != 0 {
			at := time.Unix(t, 0).UTC()
			c.LastActive = &at
		}
		fmt.Fprintf(&b, "  %s (%s): %s\n", s.who, s.acl, ioText(c, now))
	}
	return b.String()
}
