package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon"
)

// What the commands share: the flags of those that ask the daemon (--control, --json) and
// --config, their JSON output, loading the configuration, the RDMA and network seams, and a
// few words.

// controlTimeout bounds one command's exchange with the daemon. A reload opens backstores,
// which may take a while on a busy host.
const controlTimeout = 2 * time.Minute

// controlFlags are the flags every command that talks to the daemon has.
type controlFlags struct {
	path   string
	asJSON bool
}

func (f *controlFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "control", control.DefaultSocket, "the daemon's control socket (serve --control)")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the daemon's answer as JSON ({\"version\", \"ok\", \"result\"})")
	controlSocketFlag(cmd)
}

// client is the daemon's control client, with the context that bounds one command's
// exchange with it.
func (f *controlFlags) client(cmd *cobra.Command) (control.Client, context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(cmd.Context(), controlTimeout)
	return control.Client{Path: f.path}, ctx, cancel
}

// print prints the daemon's answer: with --json as the daemon gave it (raw), otherwise as
// text.
func (f *controlFlags) print(cmd *cobra.Command, raw json.RawMessage, text func() string) error {
	if f.asJSON {
		return printJSONAnswer(cmd.OutOrStdout(), raw)
	}
	_, err := io.WriteString(cmd.OutOrStdout(), text())
	return err
}

// printResult prints v: with --json (asJSON) in the envelope of the control socket's answers,
// otherwise as text.
func printResult(cmd *cobra.Command, asJSON bool, v any, text func() string) error {
	if asJSON {
		return printJSONResult(cmd.OutOrStdout(), v)
	}
	_, err := io.WriteString(cmd.OutOrStdout(), text())
	return err
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
	b, err := json.MarshalIndent(control.Response{Version: control.Version, OK: true, Result: result}, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// configFileFlag marks a --config flag as a YAML file for completion.
func configFileFlag(cmd *cobra.Command) {
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
}

// controlSocketFlag lets --control complete as a file name (a socket).
func controlSocketFlag(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("control", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveDefault
	})
}

// loadConfig loads file with load (config.Load, or config.Check for validate's warnings) for
// a command that reads the configuration itself: on errors it prints them all (what validate
// prints) and fails with exit status 1.
func loadConfig(cmd *cobra.Command, file string, load func(string) (*config.Config, error)) (*config.Config, error) {
	cfg, err := load(file)
	if err != nil {
		config.WriteErrors(cmd.ErrOrStderr(), file, err)
		return nil, exitCodeError{Code: 1}
	}
	return cfg, nil
}

// loadIdentity is loadConfig and the target identity of the configuration (the first RDMA
// device's where it names none).
func loadIdentity(cmd *cobra.Command, file string, load func(string) (*config.Config, error), devices daemon.DevicesFunc) (*config.Config, daemon.Identity, error) {
	cfg, err := loadConfig(cmd, file, load)
	if err != nil {
		return nil, daemon.Identity{}, err
	}
	id, err := daemon.ResolveIdentity(cfg.Target, devices)
	return cfg, id, err
}

// loginLineDeps are the seams of login-line and devices.
type loginLineDeps struct {
	devices    daemon.DevicesFunc
	interfaces daemon.InterfacesFunc
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// DefaultConfigFile is the configuration that serve, validate and login-line read without
// --config: where `make install` puts the example (as srptarget.yaml.example) and where the
// systemd unit points.
const DefaultConfigFile = "/etc/srptarget/srptarget.yaml"
