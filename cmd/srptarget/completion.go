package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shell completion of values (srptarget completion bash|zsh|fish): LUN numbers and initiator
// port identifiers come from the running daemon, on the socket --control names (cobra parses
// the flags before it asks for completions); configuration files are YAML files.

// completionTimeout bounds a completion's question to the daemon: a shell waits for it.
const completionTimeout = 2 * time.Second

// daemonCompletion completes with the values pick takes from the daemon's answer to command,
// those not on the command line already; nothing (and no file names) when no daemon answers.
func daemonCompletion(f *controlFlags, command string, pick func(json.RawMessage) ([][2]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		raw, err := controlCall(ctx, f.path, controlRequest{Command: command})
		if err != nil {
			cobra.CompDebugln(fmt.Sprintf("srptarget: completing from the daemon: %v", err), true)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		values, err := pick(raw)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, v := range values {
			if !slices.Contains(args, v[0]) {
				out = append(out, cobra.CompletionWithDesc(v[0], v[1]))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// initiatorCompletion completes the initiator port identifiers logged in, with their source
// addresses as the description.
func initiatorCompletion(f *controlFlags) cobra.CompletionFunc {
	return daemonCompletion(f, "sessions", func(raw json.RawMessage) ([][2]string, error) {
		var ss []sessionInfo
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, err
		}
		out := make([][2]string, 0, len(ss))
		for _, s := range ss {
			out = append(out, [2]string{s.Initiator, "from " + strings.Join(s.Sources, ", ")})
		}
		return out, nil
	})
}

// lunCompletion completes the LUN numbers of the running configuration, with their backstore
// as the description.
func lunCompletion(f *controlFlags) cobra.CompletionFunc {
	return daemonCompletion(f, "luns", func(raw json.RawMessage) ([][2]string, error) {
		var ls []lunInfo
		if err := json.Unmarshal(raw, &ls); err != nil {
			return nil, err
		}
		out := make([][2]string, 0, len(ls))
		for _, l := range ls {
			out = append(out, [2]string{strconv.Itoa(l.LUN), strings.TrimSpace(l.Backstore + " " + l.Path)})
		}
		return out, nil
	})
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
