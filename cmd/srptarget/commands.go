package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
)

func newValidateCommand(deps loginLineDeps) *cobra.Command {
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
So is a path the shipped systemd unit hides (ProtectHome=yes: /home, /root, /run/user) or
makes read-only (ProtectSystem=strict: file backstores and state_dir outside
/var/lib/srptarget and the ReadWritePaths= of the drop-ins in
/etc/systemd/system/srptarget.service.d).

--diff also asks the running daemon (on its control socket) what a reload with this file
would change, as srptarget reload --dry-run does for the daemon's own file: the LUNs added,
changed and retired, the listeners, and the initiators that would lose or gain LUNs or be
disconnected. The file's text is sent; nothing is applied. Unless you are root or the
daemon's user, the daemon plans the text alone, opening and looking at nothing it names
("paths not checked"): validate has checked the paths as you, just before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ctl.asJSON {
				return validateJSON(cmd, configFile, diff, &ctl)
			}
			cfg, err := loadConfig(cmd, configFile, config.Check)
			if err != nil {
				return err
			}
			if _, err := io.WriteString(cmd.OutOrStdout(), cfg.Summary()); err != nil {
				return err
			}
			for _, w := range daemon.ShippedSandbox(daemon.UnitDropInDir).Check(cfg) {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w.Error())
			}
			for _, w := range daemon.IBPortWarnings(cfg, deps.devices) {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w)
			}
			if !diff {
				return nil
			}
			res, err := validateDiff(cmd, configFile, &ctl)
			if err != nil {
				return err
			}
			_, _ = io.WriteString(cmd.OutOrStdout(), "against the running daemon: "+reloadText(res))
			for _, e := range res.Errors {
				fmt.Fprintln(cmd.ErrOrStderr(), e)
			}
			if len(res.Errors) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "the running daemon would refuse it: %d %s\n", len(res.Errors), plural(len(res.Errors), "error"))
				return exitCodeError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", DefaultConfigFile, "configuration file")
	cmd.Flags().BoolVar(&diff, "diff", false, "also print what a reload with this file would change in the running daemon (control socket)")
	ctl.add(cmd)
	configFileFlag(cmd)
	cmd.Flag("json").Usage = "print the result as JSON ({\"version\", \"ok\", \"result\"}: valid, errors and warnings with file, line and key, the settings, and with --diff the daemon's dry run)"
	return cmd
}

// validateDiff asks the running daemon for a dry run of configFile's text.
func validateDiff(cmd *cobra.Command, configFile string, ctl *controlFlags) (*control.ReloadResult, error) {
	data, err := os.ReadFile(configFile)
	if err != nil {
		return nil, err
	}
	c, ctx, cancel := ctl.client(cmd)
	defer cancel()
	res, _, err := c.PlanReload(ctx, configFile, data)
	return res, err
}

// validateJSON is validate --json: the result, whatever it is, on standard output; exit
// status 1 when the file (or, with --diff, the daemon) refuses it.
func validateJSON(cmd *cobra.Command, configFile string, diff bool, ctl *controlFlags) error {
	cfg, err := config.Check(configFile)
	var sandbox []*config.Error
	if err == nil {
		sandbox = daemon.ShippedSandbox(daemon.UnitDropInDir).Check(cfg)
	}
	res := newValidateResult(configFile, cfg, err, sandbox)
	if err == nil && diff {
		if res.Reload, err = validateDiff(cmd, configFile, ctl); err != nil {
			return err
		}
	}
	if err := printJSONResult(cmd.OutOrStdout(), res); err != nil {
		return err
	}
	if !res.Valid || res.Reload != nil && len(res.Reload.Errors) > 0 {
		return exitCodeError{Code: 1}
	}
	return nil
}

func newLoginLineCommand(deps loginLineDeps) *cobra.Command {
	var configFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "login-line",
		Short: "Print the ib_srp add_target line(s) an initiator uses to log in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, id, err := loadIdentity(cmd, configFile, config.Load, deps.devices)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONResult(cmd.OutOrStdout(), daemon.LoginLines(cfg, id, deps.interfaces, deps.devices))
			}
			_, err = io.WriteString(cmd.OutOrStdout(), daemon.LoginLineText(cfg, id, deps.interfaces, deps.devices))
			return err
		},
	}
	cmd.Flags().StringVar(&configFile, "config", DefaultConfigFile, "configuration file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the lines as JSON ({\"version\", \"ok\", \"result\"}: the identity, and per target port and listener the dest= value and the command)")
	configFileFlag(cmd)
	return cmd
}

// devicesText is the output of `srptarget devices`.
func devicesText(devs []daemon.Device) string {
	devs = slices.Clone(devs)
	slices.SortFunc(devs, func(a, b daemon.Device) int { return strings.Compare(a.Name, b.Name) })
	first := ""
	for _, d := range devs {
		if d.NodeGUID != 0 {
			first = d.Name
			break
		}
	}
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "%s: node GUID %s", d.Name, daemon.FormatGUID(d.NodeGUID))
		if d.Name == first {
			fmt.Fprintf(&b, " (the default target identity: id_ext=ioc_guid=%016x)", d.NodeGUID)
		}
		b.WriteByte('\n')
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "  port %d: %s, %s", p.Num, p.State, p.LinkLayer)
			if p.ActiveMTU != 0 {
				fmt.Fprintf(&b, ", MTU %d", p.ActiveMTU)
			}
			if p.LinkLayer == daemon.LinkLayerIB {
				fmt.Fprintf(&b, ", LID %d, P_Key %04x, IsDeviceManagementSupported %s", p.LID, p.PKey, yesNo(p.IsDM))
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
	var asJSON bool
	cmd := &cobra.Command{
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
			if asJSON {
				devs = slices.Clone(devs)
				slices.SortFunc(devs, func(a, b daemon.Device) int { return strings.Compare(a.Name, b.Name) })
			}
			return printResult(cmd, asJSON, devs, func() string { return devicesText(devs) })
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as JSON ({\"version\", \"ok\", \"result\"}: name, node GUID, ports with state, link layer, MTU and GIDs)")
	return cmd
}
