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

	"github.com/srptarget/srptarget/internal/control"
)

// Shell completion of values (srptarget completion bash|zsh|fish): LUN numbers and initiator
// port identifiers come from the running daemon, on the socket --control names (cobra parses
// the flags before it asks for completions); configuration files are YAML files.

// completionTimeout bounds a completion's question to the daemon: a shell waits for it.
const completionTimeout = 2 * time.Second

// daemonCompletion completes with the value and description pick takes from each entry of
// the daemon's answer to command (a list of T), those not on the command line already;
// nothing (and no file names) when no daemon answers.
func daemonCompletion[T any](f *controlFlags, command string, pick func(T) (value, desc string)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		raw, err := control.Call(ctx, f.path, control.Request{Command: command})
		if err != nil {
			cobra.CompDebugln(fmt.Sprintf("srptarget: completing from the daemon: %v", err), true)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var entries []T
		if err := json.Unmarshal(raw, &entries); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, e := range entries {
			if v, desc := pick(e); !slices.Contains(args, v) {
				out = append(out, cobra.CompletionWithDesc(v, desc))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// initiatorCompletion completes the initiator port identifiers logged in, with their source
// addresses as the description.
func initiatorCompletion(f *controlFlags) cobra.CompletionFunc {
	return daemonCompletion(f, "sessions", func(s control.SessionInfo) (string, string) {
		return s.Initiator, "from " + strings.Join(s.Sources, ", ")
	})
}

// lunCompletion completes the LUN numbers of the running configuration, with their backstore
// as the description.
func lunCompletion(f *controlFlags) cobra.CompletionFunc {
	return daemonCompletion(f, "luns", func(l control.LUNInfo) (string, string) {
		return strconv.Itoa(l.LUN), strings.TrimSpace(l.Backstore + " " + l.Path)
	})
}
