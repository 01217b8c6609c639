package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/lib/fileperm"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
)

// Load reads, strictly decodes and validates a configuration file.
func Load(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(file, data)
}

// LoadTrusted is Load for the daemon, which acts on what the file says with its
// own privileges: export any file or device, open it to any initiator. So, as sshd(8) does
// with its configuration and keys (StrictModes), it refuses a file that someone else could
// have written: one not owned by root or by the daemon's effective uid, or writable by its
// group or others. The check is made on the open descriptor (fstat(2)), on the very file that
// is then read.
func LoadTrusted(file string) (*Config, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("config %s: fstat: %w", file, err)
	}
	if msg := fileProblem(file, st.Uid, st.Mode, uint32(os.Geteuid())); msg != "" {
		return nil, &Error{File: file, Msg: "refusing the configuration file: " + msg}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(file, data)
}

// fileProblem says why LoadTrusted refuses a configuration file owned by uid with
// mode mode, for a daemon whose effective uid is euid, with the commands that fix it; "" when
// it accepts the file.
func fileProblem(file string, uid, mode, euid uint32) string {
	what, fix := fileperm.Problem(file, uid, mode, euid, "root")
	if what == "" {
		return ""
	}
	return fmt.Sprintf("%s, and whoever can change it can export any file of this host to any initiator; fix it with %s", what, fix)
}

// fileWarnings is the check of LoadTrusted as validate makes it. People validate
// files they do not own, as users the daemon does not run as, so what serve would refuse is
// a warning here; and a file owned by an ordinary user (a configuration in a checkout), which
// serve accepts only when it runs as that user, gets a warning that root's daemon refuses it.
func fileWarnings(file string) Errors {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return nil // Load reported it
	}
	euid := uint32(os.Geteuid())
	if msg := fileProblem(file, st.Uid, st.Mode, euid); msg != "" {
		return Errors{{File: file, Msg: "serve refuses this file: " + msg}}
	}
	if st.Uid != 0 {
		return Errors{{File: file, Msg: fmt.Sprintf("owned by uid %d: serve accepts it only when srptarget runs as that user, and refuses it when it runs as root; "+
			"for root, install a copy as root's (`sudo install -D -m 0644 %s /etc/srptarget/%s`)", st.Uid, file, filepath.Base(file))}}
	}
	return nil
}

// Parse decodes data strictly (unknown keys are errors), fills defaults (ApplyDefaults) and
// validates (Validate). Errors name the file, the line and the key, and come all at once, in
// file order: the keys and values the decoder would refuse (checkDocument) and what validation
// finds in the rest.
func Parse(file string, data []byte) (*Config, error) { return parse(file, data, false) }

// ParseText is Parse for a text that someone else wrote and that must not make the caller look
// at the file system on its behalf (the daemon planning a client's configuration): the paths it
// names are checked for their form only (absolute, one LUN each), not for what is there, so
// that the errors disclose nothing about them.
func ParseText(file string, data []byte) (*Config, error) { return parse(file, data, true) }

func parse(file string, data []byte, textOnly bool) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(file, data, err)
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: file, Msg: "the file is empty"}
	}
	typeErrs, meant := checkDocument(file, &root)
	var cfg Config
	if len(typeErrs) == 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return nil, &Error{File: file, Msg: cleanYAMLError(err)}
		}
	} else if err := root.Decode(&cfg); err != nil {
		// checkDocument has set the values it refused to null, so this partial decode, which
		// only serves to validate the rest of the file, should take everything else.
		var terr *yaml.TypeError
		if !errors.As(err, &terr) {
			return nil, typeErrs
		}
	}
	cfg.file, cfg.root, cfg.textOnly = file, &root, textOnly
	nullBackstores(&cfg)
	cfg.ApplyDefaults()
	found, warns := cfg.check()
	errs := typeErrs
	for _, e := range found {
		if !nearAny(e.Path, typeErrs) && !slices.Contains(meant, e.Path) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, errs
	}
	cfg.warnings = warns
	return &cfg, nil
}

// nullBackstores sets the backstore of the LUNs whose file says `backstore: null`, which YAML
// decodes as no value at all, to "null".
func nullBackstores(c *Config) {
	for i := range c.LUNs {
		l := &c.LUNs[i]
		if n := nodeAt(c.root, At("luns", i, "backstore")); l.Backstore == "" && n != nil && n.Value == "null" {
			l.Backstore = "null"
		}
	}
}

// Validate checks the configuration as ApplyDefaults completes it, without changing it: every
// error, as Errors sorted by line, or nil. Errors name the file and line when c came from Parse
// or Load. Parse has validated what it returns; Validate is for a Config built or changed in Go.
func (c *Config) Validate() error {
	errs, _ := c.check()
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
	return errs
}

// check validates c with its defaults applied and returns the errors and the warnings.
func (c *Config) check() (errs, warns Errors) {
	root := c.root
	if root == nil {
		root = &yaml.Node{}
	}
	v := validator{file: c.file, root: root, textOnly: c.textOnly}
	v.validate(c.withDefaults())
	return v.errs, v.warns
}

// nearAny reports whether path is at, under or above the path of one of errs (or errs has an
// error about the whole document): validation of a value the decoder refused (left at zero)
// would only add a wrong second error about it.
func nearAny(path string, errs Errors) bool {
	under := func(p, parent string) bool {
		return p == parent || parent != "" && (strings.HasPrefix(p, parent+".") || strings.HasPrefix(p, parent+"["))
	}
	for _, e := range errs {
		if e.Path == "" || under(path, e.Path) || under(e.Path, path) {
			return true
		}
	}
	return false
}

// yamlLine is the line yaml.v3 puts at the start of its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): `)

// syntaxError turns a YAML syntax error into a Error that has its line. yaml.v3 gives
// the line where the block it was parsing starts (a mis-indented line 8 in a list that starts
// at line 5 is "line 5"), so the line of the problem is found as the first line at which the
// file, cut there, fails with the same error; files of more than maxSyntaxProbe lines are not
// probed, as each probe parses the file again.
func syntaxError(file string, data []byte, err error) *Error {
	const maxSyntaxProbe = 2000
	s := err.Error()
	m := yamlLine.FindStringSubmatch(s)
	if m == nil {
		return &Error{File: file, Msg: cleanYAMLError(err)}
	}
	line, _ := strconv.Atoi(m[1])
	msg := s[len(m[0]):]
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxProbe {
		return &Error{File: file, Line: line, Msg: msg}
	}
	for n := line; n < len(lines); n++ {
		var root yaml.Node
		if perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &root); perr != nil {
			if perr.Error() == s && n > line {
				return &Error{File: file, Line: n, Msg: fmt.Sprintf("%s (in what starts at line %d)", msg, line)}
			}
			break
		}
	}
	return &Error{File: file, Line: line, Msg: msg}
}

// cleanYAMLError drops the library's "yaml: " prefixes; its messages already carry line numbers.
func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "yaml: unmarshal errors:\n  ", "")
	s = strings.ReplaceAll(s, "\n  ", "; ")
	return strings.TrimPrefix(s, "yaml: ")
}

// Check is Load for `srptarget validate`, which people run on files they may not own, as users
// the daemon does not run as: what LoadTrusted would refuse in the file's owner or mode comes
// first among the warnings rather than as an error.
func Check(file string) (*Config, error) {
	c, err := Load(file)
	if err != nil {
		return nil, err
	}
	c.warnings = append(fileWarnings(file), c.warnings...)
	return c, nil
}
