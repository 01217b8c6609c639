package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// validateText is the summary `srptarget validate` prints for a valid configuration.
func validateText(file string, cfg *Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: OK\n", file)
	if configured(cfg.Target) {
		id, err := resolveIdentity(cfg.Target, nil)
		if err == nil {
			fmt.Fprintf(&b, "target: id_ext=%016x ioc_guid=%016x\n", id.idExt, id.iocGUID)
		}
	} else {
		b.WriteString("target: id_ext and ioc_guid from the node GUID of the first RDMA device (at start-up)\n")
	}

	fmt.Fprintf(&b, "listeners (%d):\n", len(cfg.Listeners))
	for _, l := range cfg.Listeners {
		addr, _ := ParseListenAddress(l.Address)
		fmt.Fprintf(&b, "  %v\n", netip.AddrPortFrom(addr, l.Port))
	}

	lim := &cfg.Limits
	fmt.Fprintf(&b, "limits: max_it_iu_len %d, credits %d, max_channels %d, max_transfer_size %v, send_queue_depth %d, buffer_pool_size %v, immediate_data %t\n",
		lim.MaxIUSize, lim.Credits, lim.MaxChannels, lim.MaxTransferSize, lim.SendQueueDepth, lim.BufferPoolSize, *lim.ImmediateData)
	fmt.Fprintf(&b, "        rdma_timeout %v, max_channel_buffer %v (%s), max_sessions %d, max_channels_total %d, max_logins_in_progress %d\n",
		lim.rdmaTimeout, Size(lim.maxChannelBuffer), lim.MaxChannelBuffer, lim.MaxSessions, lim.MaxChannelsTotal, lim.MaxLoginsInProgress)

	fmt.Fprintf(&b, "LUNs (%d):\n", len(cfg.LUNs))
	luns := slices.Clone(cfg.LUNs)
	slices.SortFunc(luns, func(a, b LUNConfig) int { return *a.LUN - *b.LUN })
	for _, l := range luns {
		fmt.Fprintf(&b, "  LUN %d: %s\n", *l.LUN, strings.Join(lunSummary(&l), ", "))
	}

	fmt.Fprintf(&b, "ACLs (%d):\n", len(cfg.ACLs))
	// inACL is where each LUN is granted: true in an ACL that can match, false in ACLs that
	// all come after one that matches everything they name (shadowedBy).
	inACL := map[int]bool{}
	for i, a := range cfg.ACLs {
		var who []string
		if len(a.Initiators) > 0 {
			who = append(who, "initiators "+strings.Join(a.Initiators, ", "))
		}
		if len(a.Sources) > 0 {
			who = append(who, "sources "+strings.Join(a.Sources, ", "))
		}
		access := ""
		if a.ReadOnly {
			access = ", read-only"
		}
		fmt.Fprintf(&b, "  acls[%d]: %s -> LUNs %s%s\n", i, strings.Join(who, " or "), strings.Trim(intList(a.LUNs), "[]"), access)
		live, _ := shadowedBy(cfg.ACLs, i)
		for _, n := range a.LUNs {
			inACL[n] = inACL[n] || live < 0
		}
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(&b, "warning: %v\n", w)
	}
	if len(cfg.ACLs) == 0 {
		b.WriteString("warning: no ACLs: every login will be refused\n")
	}
	for _, l := range luns {
		if live, listed := inACL[*l.LUN]; len(cfg.ACLs) > 0 && !listed {
			fmt.Fprintf(&b, "warning: LUN %d is in no ACL: no initiator sees it\n", *l.LUN)
		} else if listed && !live {
			fmt.Fprintf(&b, "warning: LUN %d is only in ACLs that are never used: no initiator sees it\n", *l.LUN)
		}
	}
	return b.String()
}

// lunSummary describes one LUN in a few words, leaving out what is at its default.
func lunSummary(l *LUNConfig) []string {
	var s []string
	switch l.Backstore {
	case "file":
		f := "file " + l.Path
		if l.Create {
			f += " (created if missing)"
		}
		s = append(s, f)
	case "block":
		s = append(s, "block "+l.Path)
	default:
		s = append(s, string(l.Backstore))
	}
	if l.Size != 0 {
		s = append(s, l.Size.String())
	}
	if l.Backstore != "block" {
		s = append(s, fmt.Sprintf("%d-byte blocks", l.BlockSize))
	}
	if l.ReadOnly {
		s = append(s, "read-only")
	}
	if l.AllowSharedFile {
		s = append(s, "shared file allowed")
	}
	for _, kv := range [][2]string{{"vendor", l.Vendor}, {"product", l.Product}, {"revision", l.Revision}, {"serial", l.Serial}} {
		if kv[1] != "" {
			s = append(s, fmt.Sprintf("%s %q", kv[0], kv[1]))
		}
	}
	if l.WriteCache != nil && !*l.WriteCache {
		s = append(s, "write cache off")
	}
	if l.ThinProvisioning != nil {
		if *l.ThinProvisioning {
			s = append(s, "thin provisioning on")
		} else {
			s = append(s, "thin provisioning off")
		}
	}
	return s
}

// printConfigErrors prints every error of a configuration that failed to load, one a line,
// then a count.
func printConfigErrors(w io.Writer, file string, err error) {
	var errs ConfigErrors
	var one *ConfigError
	switch {
	case errors.As(err, &errs):
	case errors.As(err, &one):
		errs = ConfigErrors{one}
	default:
		fmt.Fprintln(w, err)
		return
	}
	for _, e := range errs {
		fmt.Fprintln(w, e.Error())
	}
	word := "errors"
	if len(errs) == 1 {
		word = "error"
	}
	fmt.Fprintf(w, "%s: %d %s\n", file, len(errs), word)
}

func newValidateCommand() *cobra.Command {
	var configFile string
	var diff bool
	var ctl controlFlags
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration file and summarise it",
		Long: `Check a configuration file the way serve and a reload do (without opening backstores
or listening) and print a summary, or every error with its line number and a non-zero exit.
A file that serve would refuse for its owner or mode (writable by others than root or the
daemon's user) is a warning here: validate is often run by another user than the daemon's.

--diff also asks the running daemon (on its control socket) what a reload with this file
would change, as srptarget reload --dry-run does for the daemon's own file: the LUNs added,
changed and retired, the listeners, and the initiators that would lose or gain LUNs or be
disconnected. The file's text is sent; nothing is applied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := LoadConfig(configFile)
			if err != nil {
				printConfigErrors(cmd.ErrOrStderr(), configFile, err)
				return exitCodeError{1}
			}
			cfg.warnings = append(configFileWarnings(configFile), cfg.warnings...)
			if _, err := io.WriteString(cmd.OutOrStdout(), validateText(configFile, cfg)); err != nil || !diff {
				return err
			}
			data, err := os.ReadFile(configFile)
			if err != nil {
				return err
			}
			var res reloadResult
			req := controlRequest{Command: "reload", DryRun: true, ConfigYAML: string(data), ConfigName: configFile}
			if done, err := ctl.call(cmd, req, &res); done || err != nil {
				return err
			}
			_, _ = io.WriteString(cmd.OutOrStdout(), "against the running daemon: "+reloadText(&res))
			for _, e := range res.Errors {
				fmt.Fprintln(cmd.ErrOrStderr(), e)
			}
			if len(res.Errors) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "the running daemon would refuse it: %d %s\n", len(res.Errors), plural(len(res.Errors), "error"))
				return exitCodeError{1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", DefaultConfigFile, "configuration file")
	cmd.Flags().BoolVar(&diff, "diff", false, "also print what a reload with this file would change in the running daemon (control socket)")
	ctl.add(cmd)
	return cmd
}

// loginLineDeps are the seams of login-line and devices.
type loginLineDeps struct {
	devices    devicesFunc
	interfaces interfacesFunc
}

func newLoginLineCommand(deps loginLineDeps) *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:   "login-line",
		Short: "Print the ib_srp add_target line(s) an initiator uses to log in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := LoadConfig(configFile)
			if err != nil {
				printConfigErrors(cmd.ErrOrStderr(), configFile, err)
				return exitCodeError{1}
			}
			id, err := resolveIdentity(cfg.Target, deps.devices)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), loginLineText(cfg, id, deps.interfaces))
			return err
		},
	}
	cmd.Flags().StringVar(&configFile, "config", DefaultConfigFile, "configuration file")
	return cmd
}

// formatGUID writes a GUID as ibv_devinfo does: 0002:c903:00a0:b0c1.
func formatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xFFFF, g>>16&0xFFFF, g&0xFFFF)
}

// devicesText is the output of `srptarget devices`.
func devicesText(devs []rdmaDevice) string {
	devs = slices.Clone(devs)
	slices.SortFunc(devs, func(a, b rdmaDevice) int { return strings.Compare(a.Name, b.Name) })
	first := ""
	for _, d := range devs {
		if d.NodeGUID != 0 {
			first = d.Name
			break
		}
	}
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "%s: node GUID %s", d.Name, formatGUID(d.NodeGUID))
		if d.Name == first {
			fmt.Fprintf(&b, " (the default target identity: id_ext=ioc_guid=%016x)", d.NodeGUID)
		}
		b.WriteByte('\n')
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "  port %d: %s, %s", p.Num, p.State, p.LinkLayer)
			if p.ActiveMTU != 0 {
				fmt.Fprintf(&b, ", MTU %d", p.ActiveMTU)
			}
			b.WriteByte('\n')
			for _, g := range p.GIDs {
				fmt.Fprintf(&b, "    gid %d: %v (%s", g.Index, g.GID.Unmap(), g.Type)
				if g.Netdev != "" {
					fmt.Fprintf(&b, ", %s", g.Netdev)
				}
				b.WriteString(")\n")
			}
		}
	}
	return b.String()
}

// errNoDevices is the message for a host with RDMA support but no device.
var errNoDevices = errors.New("no RDMA devices: load the driver of the adapter (mlx5_ib, ...) or add a soft-RoCE device (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0)")

func newDevicesCommand(deps loginLineDeps) *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "List the RDMA devices, their ports and GIDs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := deps.devices()
			if err != nil {
				return err
			}
			if len(devs) == 0 {
				return errNoDevices
			}
			_, err = io.WriteString(cmd.OutOrStdout(), devicesText(devs))
			return err
		},
	}
}
