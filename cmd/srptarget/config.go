package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
)

// Config is the daemon's configuration file. Every field is documented in configs/README.md;
// unknown keys are errors, so a typo never silently falls back to a default.
type Config struct {
	Target    TargetConfig     `yaml:"target"`
	Listeners []ListenerConfig `yaml:"listeners"`
	Limits    LimitsConfig     `yaml:"limits"`
	LUNs      []LUNConfig      `yaml:"luns"`
	ACLs      []ACLConfig      `yaml:"acls"`
	ALUA      *ALUAConfig      `yaml:"alua"`
	// StateDir is where the persistent reservations an initiator asked to keep through a
	// power loss (APTPL) are saved, one file per logical unit; default /var/lib/srptarget.
	StateDir string `yaml:"state_dir"`

	// file and root are where the configuration came from, so that errors found after
	// validation (a backstore that fails to open) can still name the file and line.
	file string
	root *yaml.Node
	// warnings are problems that do not stop the configuration from loading, such as a path
	// that the user who validates cannot look at (the daemon may run as another user).
	warnings ConfigErrors
}

// Warnings returns what validation found questionable but not wrong.
func (c *Config) Warnings() ConfigErrors { return c.warnings }

// TargetConfig is the target's SRP identity. Both halves of the target port identifier an
// initiator names in add_target must match: id_ext and ioc_guid.
type TargetConfig struct {
	// IDExt and IOCGUID are 64-bit values written as 16 hex digits (an optional 0x and colons
	// are accepted). When absent they are derived from the RDMA device's node GUID.
	IDExt   string `yaml:"id_ext"`
	IOCGUID string `yaml:"ioc_guid"`
	// RelativePortID is the RELATIVE TARGET PORT IDENTIFIER of this target port (default 1).
	RelativePortID uint16 `yaml:"relative_port_id"`
	// Ports are further target ports of this daemon, each a path of its own in the ALUA
	// target port groups.
	Ports []PortConfig `yaml:"ports"`
}

// PortConfig is one more SRP target port: another target port identifier on the same
// listeners, and another SCSI target port.
type PortConfig struct {
	// IDExt is required; IOCGUID defaults to the target's ioc_guid.
	IDExt          string `yaml:"id_ext"`
	IOCGUID        string `yaml:"ioc_guid"`
	RelativePortID uint16 `yaml:"relative_port_id"`
}

// ALUAConfig is the asymmetric logical unit access configuration: the target port groups and
// their states, which a reload may change. Without it every port of the daemon is in one
// active/optimized group, 0.
type ALUAConfig struct {
	Groups []PortGroupConfig `yaml:"groups"`
}

// PortGroupConfig is one target port group.
type PortGroupConfig struct {
	ID *int `yaml:"id"`
	// State is active/optimized, active/non-optimized, standby, unavailable or transitioning.
	State string `yaml:"state"`
	// Preferred sets PREF in REPORT TARGET PORT GROUPS.
	Preferred bool `yaml:"preferred"`
	// Ports are relative target port identifiers: this daemon's (target.relative_port_id and
	// target.ports) and others' (another daemon in front of the same storage).
	Ports []int `yaml:"ports"`

	state scsi.AccessState
}

// ListenerConfig is one RDMA/CM listening address.
type ListenerConfig struct {
	// Address is an IPv4 or IPv6 address, "0.0.0.0" or "::" for all; IPv6 link-local addresses
	// carry their zone ("fe80::1%eth0").
	Address string `yaml:"address"`
	Port    uint16 `yaml:"port"`
}

// LimitsConfig bounds what one initiator can use. The keys are named as the engine's log
// messages name them (a login refused for its IU length says "raise limits.max_it_iu_len").
type LimitsConfig struct {
	// MaxIUSize is the largest information unit an initiator may send (SRP MAXIMUM
	// INITIATOR-TO-TARGET IU LENGTH, the size of each receive buffer). Linux with immediate
	// data asks for 8260 bytes; the default 8276 (LIO's) accepts it.
	MaxIUSize Size `yaml:"max_it_iu_len"`
	// Credits is the number of commands one channel may have outstanding (receive buffers).
	Credits int `yaml:"credits"`
	// MaxChannels is the most channels one initiator may open in one session (ib_srp ch_count).
	MaxChannels int `yaml:"max_channels"`
	// MaxTransferSize is the largest data transfer of one command.
	MaxTransferSize Size `yaml:"max_transfer_size"`
	// SendQueueDepth is the send queue depth of each channel (clamped to the device's limit).
	SendQueueDepth int `yaml:"send_queue_depth"`
	// BufferPoolSize is the data-buffer memory registered per RDMA device, shared by its
	// channels; a command waits for a buffer when it is all in use.
	BufferPoolSize Size `yaml:"buffer_pool_size"`
	// ImmediateData grants SRP-2 immediate data to initiators that ask for it (default true).
	ImmediateData *bool `yaml:"immediate_data"`
	// Completion is how an idle channel waits for work: event (sleep until the completion
	// queue raises an event), adaptive (keep polling for poll_window after the last work,
	// then sleep) or poll (never sleep: one busy CPU per channel). docs/benchmarks.md has the
	// measurements behind the default.
	Completion string `yaml:"completion"`
	// PollWindow is how long an adaptive channel keeps polling after its last work, as a Go
	// duration ("50us").
	PollWindow string `yaml:"poll_window"`
	// RDMATimeout is how long a channel's RDMA work may make no progress before the channel
	// is closed and its buffers freed (an initiator that stopped taking responses), as a Go
	// duration ("30s"). Task management waits are bounded by it too.
	RDMATimeout string `yaml:"rdma_timeout"`
	// MaxChannelBuffer is how much of the buffer pool one channel may hold: a size ("16MiB")
	// or a percentage of buffer_pool_size ("25%").
	MaxChannelBuffer string `yaml:"max_channel_buffer"`
	// MaxSessions bounds the initiator sessions (I_T nexuses) the target keeps.
	MaxSessions int `yaml:"max_sessions"`
	// MaxChannelsTotal bounds the channels of all initiators together.
	MaxChannelsTotal int `yaml:"max_channels_total"`
	// MaxLoginsInProgress bounds the logins handled at once; more are refused at once.
	MaxLoginsInProgress int `yaml:"max_logins_in_progress"`

	completion       srp.CompletionMode
	pollWindow       time.Duration
	rdmaTimeout      time.Duration
	maxChannelBuffer int64
}

// LUNConfig is one logical unit.
type LUNConfig struct {
	LUN *int `yaml:"lun"`
	// Backstore is file, block, memory, null or rbd.
	Backstore BackstoreKind `yaml:"backstore"`
	// Path is the file or block device (file and block backstores).
	Path string `yaml:"path"`
	// Size is the capacity (file with create, memory, null), e.g. 10GiB.
	Size Size `yaml:"size"`
	// Create makes the file, sparse, when it does not exist.
	Create bool `yaml:"create"`
	// ReadOnly write-protects the LUN for everyone.
	ReadOnly bool `yaml:"read_only"`
	// BlockSize is the logical block size: 512 (default), 1024, 2048 or 4096.
	BlockSize int `yaml:"block_size"`
	// Serial is the unit serial number; default derived from the target identity and LUN.
	Serial string `yaml:"serial"`
	// Vendor, Product and Revision are the INQUIRY strings (8, 16 and 4 characters at most).
	Vendor   string `yaml:"vendor"`
	Product  string `yaml:"product"`
	Revision string `yaml:"revision"`
	// WriteCache is the initial WCE bit (default true): with it off every write is durable
	// before it completes.
	WriteCache *bool `yaml:"write_cache"`
	// ThinProvisioning advertises UNMAP and WRITE SAME with UNMAP (default true where the
	// backstore can deallocate).
	ThinProvisioning *bool `yaml:"thin_provisioning"`
	// AllowSharedFile accepts a file that another user owns or that its group or others can
	// write, or a world-writable device node (file and block). Without it such a backstore is
	// refused: whoever can write it reads and changes what every initiator stores there.
	AllowSharedFile bool `yaml:"allow_shared_file"`
	// RBD names the Ceph RBD image of an rbd backstore and how to reach its cluster.
	RBD *RBDConfig `yaml:"rbd"`
}

// RBDConfig is the image and the cluster of an rbd backstore. It holds only comparable values,
// so that it can be part of the key that keeps an open image across reloads.
type RBDConfig struct {
	// Pool is the RADOS pool of the image (default rbd).
	Pool string `yaml:"pool"`
	// Namespace is the RADOS namespace inside the pool (optional).
	Namespace string `yaml:"namespace"`
	// Image is the image's name.
	Image string `yaml:"image"`
	// CephConf is the ceph.conf to read (default: librados' search path, /etc/ceph/ceph.conf).
	CephConf string `yaml:"ceph_conf"`
	// MonHost lists the monitors, overriding ceph_conf's mon_host.
	MonHost string `yaml:"mon_host"`
	// ClientID is the cephx user without "client." (default admin).
	ClientID string `yaml:"client_id"`
	// Keyring is the path of the user's keyring.
	Keyring string `yaml:"keyring"`
	// MountTimeout bounds connecting to the monitors (default 10s).
	MountTimeout string `yaml:"rados_mount_timeout"`
	// OSDOpTimeout bounds every request to an OSD (default 20s): a cluster that stops
	// answering turns into LOGICAL UNIT COMMUNICATION TIME-OUT, never a hung command.
	OSDOpTimeout string `yaml:"rados_osd_op_timeout"`

	mountTimeout time.Duration
	osdOpTimeout time.Duration
}

// Defaults of an rbd backstore.
const (
	DefaultRBDPool         = "rbd"
	DefaultRBDMountTimeout = 10 * time.Second
	DefaultRBDOSDOpTimeout = 20 * time.Second
)

// ACLConfig grants a set of initiators access to LUNs. An initiator matches when its port
// identifier matches one of Initiators or its source address one of Sources; the first
// matching ACL wins.
type ACLConfig struct {
	// Initiators are initiator port identifiers (0x and 32 hex digits) with shell-style
	// wildcards: "*" matches any initiator.
	Initiators []string `yaml:"initiators"`
	// Sources are source addresses or prefixes ("192.168.1.7", "10.0.0.0/8", "fe80::/10").
	Sources []string `yaml:"sources"`
	// LUNs are the LUN numbers these initiators see.
	LUNs []int `yaml:"luns"`
	// ReadOnly write-protects those LUNs for these initiators.
	ReadOnly bool `yaml:"read_only"`
}

// Defaults.
const (
	DefaultMaxIUSize       = 8276
	DefaultCredits         = 128
	DefaultMaxChannels     = 16
	DefaultMaxTransferSize = 8 << 20
	DefaultBlockSize       = 512
	DefaultSendQueueDepth  = srp.DefaultSendQueueDepth
	DefaultBufferPoolSize  = srp.DefaultBufferPoolSize
	DefaultRDMATimeout     = srp.DefaultRDMATimeout
	// DefaultMaxChannelBuffer is the share of the buffer pool one channel may hold.
	DefaultMaxChannelBuffer    = "25%"
	DefaultMaxSessions         = srp.DefaultMaxSessions
	DefaultMaxChannelsTotal    = srp.DefaultMaxChannelsTotal
	DefaultMaxLoginsInProgress = srp.DefaultMaxLoginsInProgress
	// MinIUSize is the smallest MAX IT IU LENGTH that still lets Linux log in without
	// immediate data with its default 12 descriptors (48 + 16 + 20 + 12 × 16 = 276) — Linux
	// with immediate data needs 8260.
	MinIUSize = 276
	MaxLUN    = 0x3FFF
)

// BackstoreKind is file, block, memory or null. YAML reads a bare `null` as "no value", so
// ParseConfig looks at the document to tell `backstore: null` from a missing backstore.
type BackstoreKind string

// Size is a byte count written as a number or with a binary unit: 4096, 512KiB, 10GiB, 1TiB.
type Size int64

// UnmarshalYAML accepts an integer or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a size is a number or a string such as 10GiB", n.Line)}}
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		// A TypeError lets the decoder go on with the rest of the file (any other error
		// stops it), so that ParseConfig can validate the rest; checkDocument reports it.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*s = v
	return nil
}

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
	"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
}

var sizePattern = regexp.MustCompile(`^\s*([0-9]+)\s*([A-Za-z]*)\s*$`)

// parseShare parses max_channel_buffer: a size, or a percentage of pool (1% to 100%). The
// result is at least 4 KiB, the smallest buffer.
func parseShare(s string, pool int64) (int64, error) {
	var n int64
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || p < 1 || p > 100 {
			return 0, fmt.Errorf("%q: a percentage must be a whole number from 1%% to 100%% of buffer_pool_size", s)
		}
		n = pool * int64(p) / 100
	} else {
		sz, err := ParseSize(s)
		if err != nil {
			return 0, fmt.Errorf("%q: want a size such as 16MiB, or a percentage of buffer_pool_size such as 25%%", s)
		}
		if int64(sz) > pool {
			return 0, fmt.Errorf("%v is more than buffer_pool_size (%v)", sz, Size(pool))
		}
		n = int64(sz)
	}
	return max(n, 4096), nil
}

// ParseSize parses a size with an optional binary unit (KiB, MiB, GiB, TiB, PiB, or K, M, G, T
// meaning the same). Decimal units (KB, MB) are refused: disks sold in GB are not what a block
// device is sized in here, and silently choosing either meaning would be a trap.
func ParseSize(s string) (Size, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit (KiB, MiB, GiB, TiB, PiB, or K, M, G, T)", s)
	}
	mult, ok := sizeUnits[m[2]]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use KiB, MiB, GiB, TiB, PiB, or K, M, G, T: units are binary)", s, m[2])
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(n * mult), nil
}

func (s Size) String() string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(s)/u.mult, u.name)
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// ConfigError is a validation error at a place in the file.
type ConfigError struct {
	File string
	Line int    // 0 when unknown
	Path string // e.g. luns[1].size
	Msg  string
}

func (e *ConfigError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Path != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Path, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// ConfigErrors is every problem found in one file.
type ConfigErrors []*ConfigError

func (es ConfigErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// LoadConfig reads, strictly decodes and validates a configuration file.
func LoadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(file, data)
}

// LoadTrustedConfig is LoadConfig for the daemon, which acts on what the file says with its
// own privileges: export any file or device, open it to any initiator. So, as sshd(8) does
// with its configuration and keys (StrictModes), it refuses a file that someone else could
// have written: one not owned by root or by the daemon's effective uid, or writable by its
// group or others. The check is made on the open descriptor (fstat(2)), on the very file that
// is then read.
func LoadTrustedConfig(file string) (*Config, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("config %s: fstat: %w", file, err)
	}
	if msg := configFileProblem(file, st.Uid, st.Mode, uint32(os.Geteuid())); msg != "" {
		return nil, &ConfigError{File: file, Msg: "refusing the configuration file: " + msg}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(file, data)
}

// configFileProblem says why LoadTrustedConfig refuses a configuration file owned by uid with
// mode mode, for a daemon whose effective uid is euid, with the commands that fix it; "" when
// it accepts the file.
func configFileProblem(file string, uid, mode, euid uint32) string {
	var what, fixes []string
	if uid != 0 && uid != euid {
		what = append(what, fmt.Sprintf("it is owned by uid %d, neither root nor uid %d that srptarget runs as", uid, euid))
		fixes = append(fixes, "`chown root "+file+"`")
	}
	if w := mode & 0o022; w != 0 {
		who := "its group and others"
		switch w {
		case 0o020:
			who = "its group"
		case 0o002:
			who = "every user"
		}
		what = append(what, fmt.Sprintf("its mode %04o lets %s write it", mode&0o7777, who))
		fixes = append(fixes, "`chmod go-w "+file+"`")
	}
	if len(what) == 0 {
		return ""
	}
	return fmt.Sprintf("%s, and whoever can change it can export any file of this host to any initiator; fix it with %s",
		strings.Join(what, " and "), strings.Join(fixes, " and "))
}

// configFileWarnings is the check of LoadTrustedConfig as validate makes it. People validate
// files they do not own, as users the daemon does not run as, so what serve would refuse is
// a warning here; and a file owned by an ordinary user (a configuration in a checkout), which
// serve accepts only when it runs as that user, gets a warning that root's daemon refuses it.
func configFileWarnings(file string) ConfigErrors {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return nil // LoadConfig reported it
	}
	euid := uint32(os.Geteuid())
	if msg := configFileProblem(file, st.Uid, st.Mode, euid); msg != "" {
		return ConfigErrors{{File: file, Msg: "serve refuses this file: " + msg}}
	}
	if st.Uid != 0 {
		return ConfigErrors{{File: file, Msg: fmt.Sprintf("owned by uid %d: serve accepts it only when srptarget runs as that user, and refuses it when it runs as root; "+
			"for root, install a copy as root's (`sudo install -D -m 0644 %s /etc/srptarget/%s`)", st.Uid, file, filepath.Base(file))}}
	}
	return nil
}

// ParseConfig decodes data strictly (unknown keys are errors), fills defaults and validates.
// Errors name the file, the line and the key, and come all at once, in file order: the keys
// and values the decoder would refuse (checkDocument) and what validation finds in the rest.
func ParseConfig(file string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, syntaxError(file, data, err)
	}
	if len(root.Content) == 0 {
		return nil, &ConfigError{File: file, Msg: "the file is empty"}
	}
	typeErrs, meant := checkDocument(file, &root)
	var cfg Config
	if len(typeErrs) == 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return nil, &ConfigError{File: file, Msg: cleanYAMLError(err)}
		}
	} else if err := root.Decode(&cfg); err != nil {
		// checkDocument has set the values it refused to null, so this partial decode, which
		// only serves to validate the rest of the file, should take everything else.
		var terr *yaml.TypeError
		if !errors.As(err, &terr) {
			return nil, typeErrs
		}
	}
	v := validator{file: file, root: &root}
	v.validate(&cfg)
	errs := typeErrs
	for _, e := range v.errs {
		if !nearAny(e.Path, typeErrs) && !slices.Contains(meant, e.Path) {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b *ConfigError) int { return a.Line - b.Line })
		return nil, errs
	}
	cfg.file, cfg.root, cfg.warnings = file, &root, v.warns
	return &cfg, nil
}

// nearAny reports whether path is at, under or above the path of one of errs (or errs has an
// error about the whole document): validation of a value the decoder refused (left at zero)
// would only add a wrong second error about it.
func nearAny(path string, errs ConfigErrors) bool {
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

// syntaxError turns a YAML syntax error into a ConfigError that has its line. yaml.v3 gives
// the line where the block it was parsing starts (a mis-indented line 8 in a list that starts
// at line 5 is "line 5"), so the line of the problem is found as the first line at which the
// file, cut there, fails with the same error; files of more than maxSyntaxProbe lines are not
// probed, as each probe parses the file again.
func syntaxError(file string, data []byte, err error) *ConfigError {
	const maxSyntaxProbe = 2000
	s := err.Error()
	m := yamlLine.FindStringSubmatch(s)
	if m == nil {
		return &ConfigError{File: file, Msg: cleanYAMLError(err)}
	}
	line, _ := strconv.Atoi(m[1])
	msg := s[len(m[0]):]
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxProbe {
		return &ConfigError{File: file, Line: line, Msg: msg}
	}
	for n := line; n < len(lines); n++ {
		var root yaml.Node
		if perr := yaml.Unmarshal(bytes.Join(lines[:n], nil), &root); perr != nil {
			if perr.Error() == s && n > line {
				return &ConfigError{File: file, Line: n, Msg: fmt.Sprintf("%s (in what starts at line %d)", msg, line)}
			}
			break
		}
	}
	return &ConfigError{File: file, Line: line, Msg: msg}
}

// cleanYAMLError drops the library's "yaml: " prefixes; its messages already carry line numbers.
func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.ReplaceAll(s, "yaml: unmarshal errors:\n  ", "")
	s = strings.ReplaceAll(s, "\n  ", "; ")
	return strings.TrimPrefix(s, "yaml: ")
}

type validator struct {
	file  string
	root  *yaml.Node
	errs  ConfigErrors
	warns ConfigErrors
}

// errorf records a problem at the YAML path (keys and indexes), with the line of the deepest
// node of the path that exists.
func (v *validator) errorf(p []any, format string, args ...any) {
	v.errs = append(v.errs, &ConfigError{File: v.file, Line: lineOf(v.root, p), Path: pathString(p), Msg: fmt.Sprintf(format, args...)})
}

// warnf records a warning as errorf records an error.
func (v *validator) warnf(p []any, format string, args ...any) {
	v.warns = append(v.warns, &ConfigError{File: v.file, Line: lineOf(v.root, p), Path: pathString(p), Msg: fmt.Sprintf(format, args...)})
}

func pathString(p []any) string {
	var b strings.Builder
	for _, e := range p {
		switch e := e.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e)
		case int:
			fmt.Fprintf(&b, "[%d]", e)
		}
	}
	return b.String()
}

// nodeAt returns the value node at path p, or nil when the document has no such node.
func nodeAt(root *yaml.Node, p []any) *yaml.Node {
	n, _, complete := walk(root, p)
	if !complete {
		return nil
	}
	return n
}

// lineOf returns the line of the deepest node of path p that the document has.
func lineOf(root *yaml.Node, p []any) int {
	_, line, _ := walk(root, p)
	return line
}

// walk follows p (mapping keys and sequence indexes) from the document root. It returns the
// deepest node reached, the line of its key (or item), and whether all of p was found.
func walk(root *yaml.Node, p []any) (node *yaml.Node, line int, complete bool) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line = n.Line
	for _, e := range p {
		var next *yaml.Node
		switch e := e.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == e {
						line, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && e < len(n.Content) {
				next = n.Content[e]
				line = next.Line
			}
		}
		if next == nil {
			return n, line, false
		}
		n = next
	}
	return n, line, true
}

func at(p ...any) []any { return p }

func (v *validator) validate(c *Config) {
	if c.Target.IDExt != "" {
		if _, err := ParseEUI64(c.Target.IDExt); err != nil {
			v.errorf(at("target", "id_ext"), "%v", err)
		}
	}
	if c.Target.IOCGUID != "" {
		if _, err := ParseEUI64(c.Target.IOCGUID); err != nil {
			v.errorf(at("target", "ioc_guid"), "%v", err)
		}
	}

	if c.StateDir == "" {
		c.StateDir = StateDir
	} else if !filepath.IsAbs(c.StateDir) {
		v.errorf(at("state_dir"), "%s is a relative path: write the whole path, from /", c.StateDir)
	}

	v.validatePorts(c)

	if len(c.Listeners) == 0 {
		v.errorf(at("listeners"), "at least one listener is needed (address and port)")
	}
	seenListen := map[netip.AddrPort]int{}
	for i, l := range c.Listeners {
		addr, err := ParseListenAddress(l.Address)
		if err != nil {
			v.errorf(at("listeners", i, "address"), "%v", err)
			continue
		}
		if l.Port == 0 {
			v.errorf(at("listeners", i, "port"), "port is missing or 0")
			continue
		}
		ap := netip.AddrPortFrom(addr, l.Port)
		if j, dup := seenListen[ap]; dup {
			v.errorf(at("listeners", i), "same address and port as listeners[%d]", j)
		}
		seenListen[ap] = i
	}

	lim := &c.Limits
	if lim.MaxIUSize == 0 {
		lim.MaxIUSize = DefaultMaxIUSize
	} else if lim.MaxIUSize < MinIUSize || lim.MaxIUSize > 1<<20 {
		v.errorf(at("limits", "max_it_iu_len"), "%d is outside %d..1MiB (Linux with immediate data needs 8260)", lim.MaxIUSize, MinIUSize)
	}
	if lim.Credits == 0 {
		lim.Credits = DefaultCredits
	} else if lim.Credits < 2 || lim.Credits > 4096 {
		v.errorf(at("limits", "credits"), "%d is outside 2..4096", lim.Credits)
	}
	if lim.MaxChannels == 0 {
		lim.MaxChannels = DefaultMaxChannels
	} else if lim.MaxChannels < 1 || lim.MaxChannels > 256 {
		v.errorf(at("limits", "max_channels"), "%d is outside 1..256", lim.MaxChannels)
	}
	if lim.MaxTransferSize == 0 {
		lim.MaxTransferSize = DefaultMaxTransferSize
	} else if lim.MaxTransferSize < 4096 || lim.MaxTransferSize > 64<<20 || lim.MaxTransferSize%4096 != 0 {
		v.errorf(at("limits", "max_transfer_size"), "%v must be a multiple of 4KiB between 4KiB and 64MiB", lim.MaxTransferSize)
	}
	if lim.SendQueueDepth == 0 {
		lim.SendQueueDepth = DefaultSendQueueDepth
	} else if lim.SendQueueDepth < 16 || lim.SendQueueDepth > 65536 {
		v.errorf(at("limits", "send_queue_depth"), "%d is outside 16..65536", lim.SendQueueDepth)
	}
	if lim.BufferPoolSize == 0 {
		lim.BufferPoolSize = max(DefaultBufferPoolSize, lim.MaxTransferSize)
	} else if lim.BufferPoolSize < lim.MaxTransferSize || lim.BufferPoolSize > 64<<30 {
		v.errorf(at("limits", "buffer_pool_size"), "%v must be at least max_transfer_size (%v) and at most 64GiB", lim.BufferPoolSize, lim.MaxTransferSize)
	} else if ram, err := totalRAM(); err == nil && int64(lim.BufferPoolSize) > ram {
		// The pool is pinned (registered for RDMA, see mlock(2)) on each device: it cannot be
		// swapped out, so one larger than RAM can never be registered.
		v.errorf(at("limits", "buffer_pool_size"), "%v is more than this machine's RAM (%v): the pool is locked in RAM for RDMA, once per device", lim.BufferPoolSize, Size(ram))
	}
	if lim.ImmediateData == nil {
		yes := true
		lim.ImmediateData = &yes
	}
	if lim.Completion == "" {
		lim.completion = srp.DefaultCompletion
		lim.Completion = lim.completion.String()
	} else if m, err := srp.ParseCompletionMode(lim.Completion); err != nil {
		v.errorf(at("limits", "completion"), "%q is not a completion mode: use event, adaptive or poll", lim.Completion)
	} else {
		lim.completion = m
	}
	if lim.PollWindow == "" {
		lim.pollWindow = srp.DefaultPollWindow
		lim.PollWindow = lim.pollWindow.String()
	} else if d, err := time.ParseDuration(lim.PollWindow); err != nil || d <= 0 || d > time.Second {
		v.errorf(at("limits", "poll_window"), "%q must be a duration between 1us and 1s, such as 50us", lim.PollWindow)
	} else {
		lim.pollWindow = d
	}
	if lim.RDMATimeout == "" {
		lim.rdmaTimeout = DefaultRDMATimeout
		lim.RDMATimeout = lim.rdmaTimeout.String()
	} else if d, err := time.ParseDuration(lim.RDMATimeout); err != nil || d < 100*time.Millisecond || d > time.Hour {
		v.errorf(at("limits", "rdma_timeout"), "%q must be a duration between 100ms and 1h, such as 30s", lim.RDMATimeout)
	} else {
		lim.rdmaTimeout = d
	}
	if lim.MaxChannelBuffer == "" {
		lim.MaxChannelBuffer = DefaultMaxChannelBuffer
	}
	if n, err := parseShare(lim.MaxChannelBuffer, int64(lim.BufferPoolSize)); err != nil {
		v.errorf(at("limits", "max_channel_buffer"), "%v", err)
	} else {
		lim.maxChannelBuffer = n
	}
	for _, c := range []struct {
		key      string
		val      *int
		def, max int
	}{
		{"max_sessions", &lim.MaxSessions, DefaultMaxSessions, 65536},
		{"max_channels_total", &lim.MaxChannelsTotal, DefaultMaxChannelsTotal, 65536},
		{"max_logins_in_progress", &lim.MaxLoginsInProgress, DefaultMaxLoginsInProgress, 1024},
	} {
		if *c.val == 0 {
			*c.val = c.def
		} else if *c.val < 1 || *c.val > c.max {
			v.errorf(at("limits", c.key), "%d is outside 1..%d", *c.val, c.max)
		}
	}
	if lim.MaxChannelsTotal < lim.MaxChannels {
		v.errorf(at("limits", "max_channels_total"), "%d is less than max_channels (%d): no initiator could open max_channels channels", lim.MaxChannelsTotal, lim.MaxChannels)
	}

	luns := map[int]int{}
	paths := map[string]int{}
	for i := range c.LUNs {
		v.validateLUN(c, i, luns, paths)
	}
	v.checkMemoryTotal(c)

	for i, a := range c.ACLs {
		if len(a.Initiators) == 0 && len(a.Sources) == 0 {
			v.errorf(at("acls", i), "an ACL needs initiators or sources (use initiators: [\"*\"] for everyone)")
		}
		for j, pat := range a.Initiators {
			if err := checkInitiatorPattern(pat); err != nil {
				v.errorf(at("acls", i, "initiators", j), "%v", err)
			}
		}
		for j, s := range a.Sources {
			if _, err := ParseSourcePrefix(s); err != nil {
				v.errorf(at("acls", i, "sources", j), "%v", err)
			}
		}
		if len(a.LUNs) == 0 {
			v.errorf(at("acls", i, "luns"), "no LUNs listed")
		}
		if j, why := shadowedBy(c.ACLs, i); j >= 0 {
			v.warnf(at("acls", i), "never used: acls[%d] comes first and %s, and the first matching ACL wins", j, why)
		}
		seen := map[int]bool{}
		for j, n := range a.LUNs {
			if _, ok := luns[n]; !ok {
				v.errorf(at("acls", i, "luns", j), "LUN %d is not defined under luns", n)
			}
			if seen[n] {
				v.errorf(at("acls", i, "luns", j), "LUN %d listed twice", n)
			}
			seen[n] = true
		}
	}
}

func (v *validator) validateLUN(c *Config, i int, luns map[int]int, paths map[string]int) {
	l := &c.LUNs[i]
	if n := nodeAt(v.root, at("luns", i, "backstore")); l.Backstore == "" && n != nil && n.Value == "null" {
		l.Backstore = "null"
	}
	if l.LUN == nil {
		v.errorf(at("luns", i), "lun (the LUN number) is missing")
	} else if *l.LUN < 0 || *l.LUN > MaxLUN {
		v.errorf(at("luns", i, "lun"), "%d is outside 0..%d", *l.LUN, MaxLUN)
	} else if j, dup := luns[*l.LUN]; dup {
		v.errorf(at("luns", i, "lun"), "LUN %d is defined twice (also luns[%d])", *l.LUN, j)
	} else {
		luns[*l.LUN] = i
	}
	if l.Backstore == "block" && l.BlockSize != 0 {
		v.errorf(at("luns", i, "block_size"), "a block device has its own block size; remove block_size")
	}
	if l.BlockSize == 0 {
		l.BlockSize = DefaultBlockSize
	}
	switch l.BlockSize {
	case 512, 1024, 2048, 4096:
	default:
		v.errorf(at("luns", i, "block_size"), "%d: Linux accepts 512, 1024, 2048 or 4096", l.BlockSize)
	}
	if l.Size != 0 && l.Size%Size(l.BlockSize) != 0 {
		v.errorf(at("luns", i, "size"), "%v is not a multiple of the block size %d", l.Size, l.BlockSize)
	}
	if l.Path != "" && !filepath.IsAbs(l.Path) {
		// serve resolves a relative path against its working directory, which is / under
		// systemd and wherever validate happened to run otherwise: the same file would name
		// different backstores. Resolving it against the configuration's directory instead
		// would surprise anyone who knows open(2), so it is refused.
		v.errorf(at("luns", i, "path"), "%s is a relative path: write the whole path, from / (serve resolves paths against its working directory, / under systemd)", l.Path)
	}
	switch l.Backstore {
	case "file":
		if l.Path == "" {
			v.errorf(at("luns", i, "path"), "a file backstore needs a path")
			break
		}
		if !filepath.IsAbs(l.Path) {
			break
		}
		// Lstat: a symbolic link is refused when the daemon opens the file (see
		// backstore.ErrSymlink), so it is an error here too.
		if st, err := os.Lstat(l.Path); err == nil {
			switch {
			case st.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(l.Path)
				v.errorf(at("luns", i, "path"), "%s is a symbolic link to %s: name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)", l.Path, target)
			case !st.Mode().IsRegular():
				v.errorf(at("luns", i, "path"), "%s is not a regular file (use backstore: block for devices)", l.Path)
			}
		} else if os.IsNotExist(err) {
			if !l.Create {
				v.errorf(at("luns", i, "path"), "%s does not exist (set create: true and a size to make it)", l.Path)
			} else if l.Size == 0 {
				v.errorf(at("luns", i, "size"), "create: true needs a size")
			}
			if l.Create {
				v.checkFileDir(at("luns", i, "path"), l.Path)
			}
		} else if errors.Is(err, unix.ENOTDIR) {
			v.checkFileDir(at("luns", i, "path"), l.Path)
		} else if errors.Is(err, fs.ErrPermission) {
			// Backstores normally live in a directory only the daemon's user can enter, and
			// validate is often run by someone else: the daemon checks the file when it opens it.
			v.warnf(at("luns", i, "path"), "cannot check %s: %v (validate as the user srptarget runs as to check it)", l.Path, err)
		} else {
			v.errorf(at("luns", i, "path"), "%v", err)
		}
	case "block":
		if l.Path == "" {
			v.errorf(at("luns", i, "path"), "a block backstore needs a path")
			break
		}
		if !filepath.IsAbs(l.Path) {
			break
		}
		if st, err := os.Stat(l.Path); err != nil {
			v.errorf(at("luns", i, "path"), "%v", err)
		} else if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
			v.errorf(at("luns", i, "path"), "%s is not a block device", l.Path)
		}
		if l.Size != 0 {
			v.errorf(at("luns", i, "size"), "a block device has its own size; remove size")
		}
		if l.Create {
			v.errorf(at("luns", i, "create"), "create applies to files only")
		}
	case "rbd":
		v.validateRBD(l, i)
	case "memory", "null":
		if l.Size == 0 {
			v.errorf(at("luns", i, "size"), "a %s backstore needs a size", l.Backstore)
		}
		if l.Backstore == "memory" {
			// A memory LUN allocates RAM as it is written: one bigger than the machine would
			// have the kernel's OOM killer end the daemon once initiators fill it.
			if ram, err := totalRAM(); err == nil && int64(l.Size) > ram {
				v.errorf(at("luns", i, "size"), "%v is more than this machine's RAM (%v): a memory LUN keeps all its data in RAM", l.Size, Size(ram))
			}
		}
		if l.AllowSharedFile {
			v.errorf(at("luns", i, "allow_shared_file"), "allow_shared_file applies to file and block backstores only")
		}
		if l.Path != "" {
			v.errorf(at("luns", i, "path"), "a %s backstore has no path", l.Backstore)
		}
		if l.Create {
			v.errorf(at("luns", i, "create"), "create applies to files only")
		}
	case "":
		v.errorf(at("luns", i), "backstore is missing (file, block, memory, null or rbd)")
	default:
		v.errorf(at("luns", i, "backstore"), "%q is not one of file, block, memory, null, rbd", l.Backstore)
	}
	if l.RBD != nil && l.Backstore != "rbd" {
		v.errorf(at("luns", i, "rbd"), "rbd applies to backstore: rbd only")
	}
	if l.Path != "" {
		clean := path.Clean(l.Path)
		if j, dup := paths[clean]; dup {
			v.errorf(at("luns", i, "path"), "%s is also used by luns[%d]", l.Path, j)
		}
		paths[clean] = i
	}
	for _, f := range []struct {
		key, val string
		max      int
	}{{"vendor", l.Vendor, 8}, {"product", l.Product, 16}, {"revision", l.Revision, 4}, {"serial", l.Serial, 64}} {
		if len(f.val) > f.max {
			v.errorf(at("luns", i, f.key), "%q is longer than %d characters", f.val, f.max)
		}
		for _, r := range f.val {
			if r < 0x20 || r > 0x7E {
				v.errorf(at("luns", i, f.key), "%q has a character that is not printable ASCII", f.val)
				break
			}
		}
	}
}

// StateDir is the daemon's own directory (systemd's StateDirectory=srptarget makes it): files
// created under it may be in directories that do not exist yet.
const StateDir = "/var/lib/srptarget"

// checkFileDir checks the directory a file backstore with create: true is made in. A missing
// directory is an error, so that a typo in the path fails rather than making a new directory
// tree somewhere, except under StateDir, the daemon's own, where serve makes it (mode 0700,
// see backstore.OpenFile) and validate only warns. A directory that cannot be made, because
// what should be one of its parents is a file, is an error.
func (v *validator) checkFileDir(p []any, file string) {
	dir := filepath.Dir(file)
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		switch {
		case err == nil && !st.IsDir():
			v.errorf(p, "%s is not a directory, so %s cannot be in it", d, filepath.Base(file))
			return
		case err == nil && d == dir:
			return
		case err == nil && inStateDir(dir):
			v.warnf(p, "directory %s does not exist: serve makes it (mode 0700) with the file", dir)
			return
		case err == nil:
			v.errorf(p, "directory %s does not exist: make it (install -d -m 0700 %s), or correct the path; only under %s does serve make missing directories", dir, dir, StateDir)
			return
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) || d == filepath.Dir(d):
			return // not ours to look at (the daemon's user may be able to): serve checks it
		}
	}
}

// inStateDir reports whether dir is StateDir or below it.
func inStateDir(dir string) bool {
	return dir == StateDir || strings.HasPrefix(dir, StateDir+"/")
}

// checkMemoryTotal warns when the memory LUNs, each smaller than RAM, are larger together:
// they can be used as long as initiators leave them sparse, and the daemon is killed when
// they do not.
func (v *validator) checkMemoryTotal(c *Config) {
	ram, err := totalRAM()
	if err != nil {
		return
	}
	var total Size
	var count int
	for _, l := range c.LUNs {
		if l.Backstore == "memory" && int64(l.Size) <= ram {
			total += l.Size
			count++
		}
	}
	if count > 1 && int64(total) > ram {
		v.warnf(at("luns"), "the %d memory LUNs hold %v together, more than this machine's RAM (%v): the daemon runs out of memory if initiators fill them", count, total, Size(ram))
	}
}

// totalRAM returns the machine's RAM in bytes (sysinfo(2) totalram, MemTotal of
// /proc/meminfo). It is a variable so that tests give every machine the same RAM.
var totalRAM = func() (int64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("sysinfo: %w", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}

// ParseEUI64 parses 16 hex digits, with an optional 0x prefix and optional colons.
func ParseEUI64(s string) (uint64, error) {
	h := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "0x"), ":", "")
	if len(h) != 16 {
		return 0, fmt.Errorf("%q: want 16 hex digits (a 64-bit identifier such as 0x0002c90300a0b0c1)", s)
	}
	n, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: not hexadecimal", s)
	}
	return n, nil
}

// ParseListenAddress parses a listener address, keeping an IPv6 zone.
func ParseListenAddress(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("address is missing (use 0.0.0.0 or :: for all addresses)")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
		return netip.Addr{}, fmt.Errorf("%q is link-local: add the interface, e.g. %s%%eth0", s, s)
	}
	return a, nil
}

// ParseSourcePrefix parses an ACL source: an address (a one-address prefix) or a prefix. An
// IPv4-mapped IPv6 address, or a prefix inside ::ffff:0:0/96, becomes its IPv4 form: Authorize
// unmaps the login's source address, so written as it is it would never match.
func ParseSourcePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address prefix such as 10.0.0.0/8", s)
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or prefix", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// initiatorPattern allows hex digits, 0x, and the wildcards * and ?.
var initiatorPattern = regexp.MustCompile(`^(0x)?[0-9a-fA-F*?]+$`)

func checkInitiatorPattern(p string) error {
	if p == "*" {
		return nil
	}
	if !initiatorPattern.MatchString(p) {
		return fmt.Errorf("%q: an initiator port id is 0x and 32 hex digits, with * and ? as wildcards", p)
	}
	if !strings.ContainsAny(p, "*?") && len(strings.TrimPrefix(p, "0x")) != 32 {
		return fmt.Errorf("%q: an initiator port id has 32 hex digits", p)
	}
	return nil
}

// MatchInitiator reports whether the initiator port id (0x and 32 hex digits) matches pattern.
func MatchInitiator(pattern, id string) bool {
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }
	ok, err := path.Match(norm(pattern), norm(id))
	return err == nil && ok
}

// errorAt is an error found after validation (a backstore that would not open, a change a
// reload cannot make) at path p of the file the configuration came from, with its line.
func (c *Config) errorAt(p []any, format string, args ...any) *ConfigError {
	e := &ConfigError{File: c.file, Path: pathString(p), Msg: fmt.Sprintf(format, args...)}
	if c.root != nil {
		e.Line = lineOf(c.root, p)
	}
	return e
}

// validateRBD checks an rbd backstore's settings and fills in the defaults.
func (v *validator) validateRBD(l *LUNConfig, i int) {
	if l.RBD == nil || l.RBD.Image == "" {
		v.errorf(at("luns", i, "rbd", "image"), "an rbd backstore needs rbd: {image: NAME} (and pool, default %s)", DefaultRBDPool)
		if l.RBD == nil {
			return
		}
	}
	r := l.RBD
	if r.Pool == "" {
		r.Pool = DefaultRBDPool
	}
	for _, f := range []struct{ key, val string }{{"pool", r.Pool}, {"namespace", r.Namespace}, {"image", r.Image}} {
		if strings.ContainsAny(f.val, "/@") || strings.ContainsFunc(f.val, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			v.errorf(at("luns", i, "rbd", f.key), "%q: a name has no /, @ or control characters", f.val)
		}
	}
	for _, f := range []struct{ key, val string }{{"ceph_conf", r.CephConf}, {"keyring", r.Keyring}} {
		if f.val != "" && !filepath.IsAbs(f.val) {
			v.errorf(at("luns", i, "rbd", f.key), "%s is a relative path: write the whole path, from /", f.val)
		}
	}
	if r.CephConf != "" {
		// A warning: the configuration may be checked on another host than the gateway.
		if _, err := os.Stat(r.CephConf); err != nil && !errors.Is(err, fs.ErrPermission) {
			v.warnf(at("luns", i, "rbd", "ceph_conf"), "%v: serve cannot connect without it", err)
		}
	}
	for _, f := range []struct {
		key      string
		val      *string
		d        *time.Duration
		def, max time.Duration
	}{
		{"rados_mount_timeout", &r.MountTimeout, &r.mountTimeout, DefaultRBDMountTimeout, time.Hour},
		{"rados_osd_op_timeout", &r.OSDOpTimeout, &r.osdOpTimeout, DefaultRBDOSDOpTimeout, 10 * time.Minute},
	} {
		if *f.val == "" {
			*f.d = f.def
			*f.val = f.def.String()
		} else if d, err := time.ParseDuration(*f.val); err != nil || d < time.Second || d > f.max {
			v.errorf(at("luns", i, "rbd", f.key), "%q must be a duration between 1s and %v, such as 20s", *f.val, f.max)
		} else {
			*f.d = d
		}
	}
	if l.Path != "" {
		v.errorf(at("luns", i, "path"), "an rbd backstore has no path (rbd: {pool, image} name it)")
	}
	if l.Size != 0 {
		v.errorf(at("luns", i, "size"), "an RBD image has its own size; remove size (rbd resize changes it, online)")
	}
	if l.Create {
		v.errorf(at("luns", i, "create"), "create applies to files only (make the image with rbd create)")
	}
	if l.AllowSharedFile {
		v.errorf(at("luns", i, "allow_shared_file"), "allow_shared_file applies to file and block backstores only")
	}
	if openRBD == nil {
		v.warnf(at("luns", i, "backstore"), "this srptarget is built without RBD support: serve refuses this LUN (build with -tags rbd where librbd-dev is installed: make build does)")
	}
}

// DefaultRelativePortID is the relative target port identifier of target's own port.
const DefaultRelativePortID = 1

// localPorts returns the relative target port identifiers this daemon serves, target's first.
func (c *Config) localPorts() []uint16 {
	ps := []uint16{c.Target.RelativePortID}
	for _, p := range c.Target.Ports {
		ps = append(ps, p.RelativePortID)
	}
	return ps
}

// portGroups returns the ALUA target port groups of the configuration: those of alua.groups,
// or one active/optimized group 0 of every local port.
func (c *Config) portGroups() []scsi.PortGroup {
	if c.ALUA == nil {
		return []scsi.PortGroup{{ID: 0, State: scsi.ActiveOptimized, Ports: c.localPorts()}}
	}
	var gs []scsi.PortGroup
	for _, g := range c.ALUA.Groups {
		pg := scsi.PortGroup{State: g.state, Preferred: g.Preferred}
		if g.ID != nil {
			pg.ID = uint16(*g.ID)
		}
		for _, p := range g.Ports {
			pg.Ports = append(pg.Ports, uint16(p))
		}
		gs = append(gs, pg)
	}
	return gs
}

// validatePorts checks target.relative_port_id, target.ports and alua.
func (v *validator) validatePorts(c *Config) {
	if c.Target.RelativePortID == 0 {
		c.Target.RelativePortID = DefaultRelativePortID
	}
	rel := map[uint16]string{c.Target.RelativePortID: "target"}
	ids := map[uint64]int{}
	for i := range c.Target.Ports {
		p := &c.Target.Ports[i]
		if p.IDExt == "" {
			v.errorf(at("target", "ports", i, "id_ext"), "id_ext is missing: each target port needs its own")
		} else if n, err := ParseEUI64(p.IDExt); err != nil {
			v.errorf(at("target", "ports", i, "id_ext"), "%v", err)
		} else if j, dup := ids[n]; dup {
			v.errorf(at("target", "ports", i, "id_ext"), "same id_ext as target.ports[%d]", j)
		} else {
			ids[n] = i
		}
		if p.IOCGUID != "" {
			if _, err := ParseEUI64(p.IOCGUID); err != nil {
				v.errorf(at("target", "ports", i, "ioc_guid"), "%v", err)
			}
		}
		if p.RelativePortID == 0 {
			v.errorf(at("target", "ports", i, "relative_port_id"), "relative_port_id is missing or 0: each target port needs its own, 1 to 65535")
			continue
		}
		if who, dup := rel[p.RelativePortID]; dup {
			v.errorf(at("target", "ports", i, "relative_port_id"), "relative port %d is %s's already", p.RelativePortID, who)
		}
		rel[p.RelativePortID] = fmt.Sprintf("target.ports[%d]", i)
	}
	if c.ALUA == nil {
		return
	}
	if len(c.ALUA.Groups) == 0 {
		v.errorf(at("alua", "groups"), "no target port group: list at least one, or remove alua")
		return
	}
	inGroup := map[int]bool{}
	ok := true
	for i := range c.ALUA.Groups {
		g := &c.ALUA.Groups[i]
		if g.ID == nil {
			v.errorf(at("alua", "groups", i, "id"), "id is missing (a target port group number, 0 to 65535)")
			ok = false
		} else if *g.ID < 0 || *g.ID > math.MaxUint16 {
			v.errorf(at("alua", "groups", i, "id"), "%d is outside 0..65535", *g.ID)
			ok = false
		}
		if st, err := scsi.ParseAccessState(g.State); err != nil {
			v.errorf(at("alua", "groups", i, "state"), "%v", err)
			ok = false
		} else {
			g.state = st
		}
		if len(g.Ports) == 0 {
			v.errorf(at("alua", "groups", i, "ports"), "no relative target port listed")
			ok = false
		}
		for j, p := range g.Ports {
			if p < 1 || p > math.MaxUint16 {
				v.errorf(at("alua", "groups", i, "ports", j), "%d is outside 1..65535", p)
				ok = false
			}
			inGroup[p] = true
		}
	}
	for _, p := range c.localPorts() {
		if !inGroup[int(p)] {
			v.errorf(at("alua", "groups"), "relative target port %d (%s) is in no target port group", p, rel[p])
			ok = false
		}
	}
	if ok {
		if _, err := scsi.NewALUA(c.portGroups()); err != nil {
			v.errorf(at("alua", "groups"), "%v", err)
		}
	}
}
