// Package integration holds the end-to-end harness (scripts that boot a VM with the kernel's
// SRP initiator, and the Go checks that run in it) and this test, which keeps the harness
// honest about the daemon's log.
package integration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/integration/vm/guest/checks"
)

// logPin is one daemon log message that a VM check reads. The guest scripts find daemon
// events by the message field of its log lines; if the message were reworded, the check
// would silently stop matching (a count of 0, or a pass for "no such line"). Each pin names
// the script, the text the script looks for, and how the script matches it, and the test
// requires both that the script still contains the text and that the daemon's Go source
// still logs it.
type logPin struct {
	script string // under integration/vm/guest
	text   string // what the script greps or compares
	// exact: the script matches the whole message field (awk $3 == "...", or the text between
	// the tabs that delimit it), so a Go string literal must equal text; otherwise some
	// literal must contain it.
	exact bool
}

var logPins = []logPin{
	{script: "rbd-e2e.sh", text: "every backstore flushed and closed"},
	{script: "gateways.sh", text: "persistent reservations shared with the other gateways"},
}

func TestGuestScriptsReadLoggedMessages(t *testing.T) {
	literals := daemonStringLiterals(t)
	for _, pin := range logPins {
		t.Run(pin.script+"/"+pin.text, func(t *testing.T) {
			script, err := os.ReadFile(filepath.Join("vm", "guest", pin.script))
			require.NoError(t, err)
			require.Contains(t, string(script), pin.text,
				"the script no longer reads this message: update logPins")
			found := false
			for _, lit := range literals {
				if lit == pin.text || !pin.exact && strings.Contains(lit, pin.text) {
					found = true
					break
				}
			}
			require.True(t, found, "no string literal of the daemon's Go source %s %q, which %s reads from its log: "+
				"the log line was reworded or removed; change the script with it",
				map[bool]string{true: "equals", false: "contains"}[pin.exact], pin.text, pin.script)
		})
	}
}

// TestGuestChecksReadLoggedMessages holds the messages the Go checks read (checks.Messages) to
// the daemon's source: each must begin one of its string literals.
func TestGuestChecksReadLoggedMessages(t *testing.T) {
	literals := daemonStringLiterals(t)
	require.NotEmpty(t, checks.Messages)
	for _, m := range checks.Messages {
		t.Run(string(m), func(t *testing.T) {
			found := false
			for _, lit := range literals {
				if strings.HasPrefix(lit, string(m)) {
					found = true
					break
				}
			}
			require.True(t, found, "no string literal of the daemon's Go source begins with %q, which the guest checks read "+
				"from its log: the log line was reworded or removed; change integration/vm/guest/checks/logmsg.go with it", m)
		})
	}
}

// TestGuestChecksReadStatusWords holds the states of srptarget status that the checks compare
// with (checks.States) to the daemon's source: each must be one of its string literals.
func TestGuestChecksReadStatusWords(t *testing.T) {
	literals := daemonStringLiterals(t)
	require.NotEmpty(t, checks.States)
	for _, w := range checks.States {
		require.Contains(t, literals, w, "srptarget status no longer says %q, which the VM checks compare with: change them with it", w)
	}
}

// daemonStringLiterals returns the string literals of the daemon's non-test Go source
// (cmd/srptarget, internal/daemon, config and the packages beside them, not the harness's own
// tools).
func daemonStringLiterals(t *testing.T) []string {
	t.Helper()
	var lits []string
	fset := token.NewFileSet()
	for _, dir := range []string{"cmd", "internal/daemon", "internal/control", "internal/accept", "config", "srp", "scsi", "backstore", "ib"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						lits = append(lits, s)
					}
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
	}
	require.NotEmpty(t, lits)
	return lits
}
