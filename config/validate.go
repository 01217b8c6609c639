package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
)

// validateIBListener checks the ib listener l, listeners[i]; seen holds the ports of the ib
// listeners before it.
func (v *validator) validateIBListener(l Listener, i int, seen map[uint16]int) {
	if l.Address != "" {
		v.errorf(At("listeners", i, "address"), "an ib listener has no address: it listens on the GIDs of InfiniBand ports (ib_ports names them; unset, every one)")
	}
	if l.Port == 0 {
		v.errorf(At("listeners", i, "port"), "port is missing or 0 (the service ID is 0x00000000013fPPPP, PPPP the port)")
		return
	}
	if j, dup := seen[l.Port]; dup {
		v.errorf(At("listeners", i, "port"), "same port as the ib listener listeners[%d]: one service ID, %016x, can be bound once; name all the HCA ports in one listener", j, ib.IBServiceID(l.Port))
	}
	seen[l.Port] = i
	names := map[IBPort]int{}
	for j, s := range l.IBPorts {
		p, err := ParseIBPort(s)
		if err != nil {
			v.errorf(At("listeners", i, "ib_ports", j), "%v", err)
			continue
		}
		if k, dup := names[p]; dup {
			v.errorf(At("listeners", i, "ib_ports", j), "%s is listed twice (ib_ports[%d])", p, k)
		}
		names[p] = j
	}
}

type validator struct {
	file  string
	root  *yaml.Node
	errs  Errors
	warns Errors
	// textOnly checks the text and nothing it names: no path is looked at (ParseText).
	textOnly bool
}

// errorf records a problem at the YAML path (keys and indexes), with the line of the deepest
// node of the path that exists.
func (v *validator) errorf(p []any, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: lineOf(v.root, p), Path: pathString(p), Msg: fmt.Sprintf(format, args...)})
}

// warnf records a warning as errorf records an error.
func (v *validator) warnf(p []any, format string, args ...any) {
	v.warns = append(v.warns, &Error{File: v.file, Line: lineOf(v.root, p), Path: pathString(p), Msg: fmt.Sprintf(format, args...)})
}

// validate checks c, whose defaults are applied (ApplyDefaults), and records what is wrong and
// what is questionable. It changes nothing.
func (v *validator) validate(c *Config) {
	if c.Target.IDExt != "" {
		if _, err := ParseEUI64(c.Target.IDExt); err != nil {
			v.errorf(At("target", "id_ext"), "%v", err)
		}
	}
	if c.Target.IOCGUID != "" {
		if _, err := ParseEUI64(c.Target.IOCGUID); err != nil {
			v.errorf(At("target", "ioc_guid"), "%v", err)
		}
	}

	if !filepath.IsAbs(c.StateDir) {
		v.errorf(At("state_dir"), "%s is a relative path: write the whole path, from /", c.StateDir)
	}

	v.validatePorts(c)

	if len(c.Listeners) == 0 {
		v.errorf(At("listeners"), "at least one listener is needed (address and port)")
	}
	seenListen := map[netip.AddrPort]int{}
	seenIB := map[uint16]int{}
	for i, l := range c.Listeners {
		switch l.Kind {
		case "", ListenerAddress:
		case ListenerIB:
			v.validateIBListener(l, i, seenIB)
			continue
		default:
			v.errorf(At("listeners", i, "kind"), "%q is not a listener kind: use address (the default: RDMA/CM on an IP address) or ib (native InfiniBand)", l.Kind)
			continue
		}
		if len(l.IBPorts) > 0 {
			v.errorf(At("listeners", i, "ib_ports"), "ib_ports is for listeners of kind ib")
		}
		addr, err := ParseListenAddress(l.Address)
		if err != nil {
			v.errorf(At("listeners", i, "address"), "%v", err)
			continue
		}
		if l.Port == 0 {
			v.errorf(At("listeners", i, "port"), "port is missing or 0")
			continue
		}
		ap := netip.AddrPortFrom(addr, l.Port)
		if j, dup := seenListen[ap]; dup {
			v.errorf(At("listeners", i), "same address and port as listeners[%d]", j)
		}
		seenListen[ap] = i
	}

	v.validateLimits(&c.Limits)

	luns := map[int]int{}
	paths := map[string]int{}
	for i := range c.LUNs {
		v.validateLUN(c, i, luns, paths)
	}
	v.checkMemoryTotal(c)
	v.checkSerials(c)

	names := map[string]int{}
	for i, a := range c.ACLs {
		if a.Name != "" {
			if !aclName.MatchString(a.Name) {
				v.errorf(At("acls", i, "name"), "%q: use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)", a.Name)
			} else if j, dup := names[a.Name]; dup {
				v.errorf(At("acls", i, "name"), "%q is the name of acls[%d] too: names are unique", a.Name, j)
			}
			names[a.Name] = i
		}
		if len(a.Initiators) == 0 && len(a.Sources) == 0 {
			v.errorf(At("acls", i), "an ACL needs initiators or sources (use initiators: [\"*\"] for everyone)")
		}
		for j, pat := range a.Initiators {
			if err := CheckInitiatorPattern(pat); err != nil {
				v.errorf(At("acls", i, "initiators", j), "%v", err)
			}
		}
		for j, s := range a.Sources {
			src, err := ParseSource(s)
			switch {
			case err != nil:
				v.errorf(At("acls", i, "sources", j), "%v", err)
			case src.IsIB() && !c.HasIBListener():
				v.warnf(At("acls", i, "sources", j), "%s matches only logins through an ib listener, and there is none", s)
			case !src.IsIB() && !c.HasAddressListener():
				v.warnf(At("acls", i, "sources", j), "%s matches only logins through an address listener, and there is none (InfiniBand sources are gid:GID or pkey:HEX)", s)
			}
		}
		if len(a.LUNs) == 0 {
			v.errorf(At("acls", i, "luns"), "no LUNs listed")
		}
		if j, why := shadowedBy(c.ACLs, i); j >= 0 {
			v.warnf(At("acls", i), "never used: acls[%d] comes first and %s, and the first matching ACL wins", j, why)
		}
		seen := map[int]bool{}
		for j, n := range a.LUNs {
			if _, ok := luns[n]; !ok {
				v.errorf(At("acls", i, "luns", j), "LUN %d is not defined under luns", n)
			}
			if seen[n] {
				v.errorf(At("acls", i, "luns", j), "LUN %d listed twice", n)
			}
			seen[n] = true
		}
	}
}

func (v *validator) validateLUN(c *Config, i int, luns map[int]int, paths map[string]int) {
	l := &c.LUNs[i]
	if l.LUN == nil {
		v.errorf(At("luns", i), "lun (the LUN number) is missing")
	} else if *l.LUN < 0 || *l.LUN > MaxLUN {
		v.errorf(At("luns", i, "lun"), "%d is outside 0..%d", *l.LUN, MaxLUN)
	} else if j, dup := luns[*l.LUN]; dup {
		v.errorf(At("luns", i, "lun"), "LUN %d is defined twice (also luns[%d])", *l.LUN, j)
	} else {
		luns[*l.LUN] = i
	}
	if l.Backstore == "block" && l.BlockSize != 0 {
		v.errorf(At("luns", i, "block_size"), "a block device has its own block size; remove block_size")
	}
	// A block LUN has no block size of its own (ApplyDefaults leaves it 0): its size is
	// checked against the default, as the size is an error there anyway.
	bs := l.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	switch bs {
	case 512, 1024, 2048, 4096:
	default:
		v.errorf(At("luns", i, "block_size"), "%d: Linux accepts 512, 1024, 2048 or 4096", bs)
	}
	if pbs := l.PhysicalBlockSize; pbs != 0 && (pbs < bs || pbs > MaxPhysicalBlockSize || pbs&(pbs-1) != 0) {
		v.errorf(At("luns", i, "physical_block_size"), "%d: a power of two from the block size (%d) to %d", pbs, bs, MaxPhysicalBlockSize)
	}
	if l.Size != 0 && l.Size%Size(bs) != 0 {
		v.errorf(At("luns", i, "size"), "%v is not a multiple of the block size %d", l.Size, bs)
	}
	if l.Path != "" && !filepath.IsAbs(l.Path) {
		// serve resolves a relative path against its working directory, which is / under
		// systemd and wherever validate happened to run otherwise: the same file would name
		// different backstores. Resolving it against the configuration's directory instead
		// would surprise anyone who knows open(2), so it is refused.
		v.errorf(At("luns", i, "path"), "%s is a relative path: write the whole path, from / (serve resolves paths against its working directory, / under systemd)", l.Path)
	}
	switch l.Backstore {
	case "file":
		if l.Path == "" {
			v.errorf(At("luns", i, "path"), "a file backstore needs a path")
			break
		}
		if !filepath.IsAbs(l.Path) || v.textOnly {
			break
		}
		// Lstat: a symbolic link is refused when the daemon opens the file (see
		// backstore.ErrSymlink), so it is an error here too.
		if st, err := os.Lstat(l.Path); err == nil {
			switch {
			case st.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(l.Path)
				v.errorf(At("luns", i, "path"), "%s is a symbolic link to %s: name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)", l.Path, target)
			case !st.Mode().IsRegular():
				v.errorf(At("luns", i, "path"), "%s is not a regular file (use backstore: block for devices)", l.Path)
			}
		} else if os.IsNotExist(err) {
			if !l.Create {
				v.errorf(At("luns", i, "path"), "%s does not exist (set create: true and a size to make it)", l.Path)
			} else if l.Size == 0 {
				v.errorf(At("luns", i, "size"), "create: true needs a size")
			}
			if l.Create {
				v.checkFileDir(At("luns", i, "path"), l.Path)
			}
		} else if errors.Is(err, unix.ENOTDIR) {
			v.checkFileDir(At("luns", i, "path"), l.Path)
		} else if errors.Is(err, fs.ErrPermission) {
			// Backstores normally live in a directory only the daemon's user can enter, and
			// validate is often run by someone else: the daemon checks the file when it opens it.
			v.warnf(At("luns", i, "path"), "cannot check %s: %v (validate as the user srptarget runs as to check it)", l.Path, err)
		} else {
			v.errorf(At("luns", i, "path"), "%v", err)
		}
	case "block":
		if l.Path == "" {
			v.errorf(At("luns", i, "path"), "a block backstore needs a path")
			break
		}
		if filepath.IsAbs(l.Path) && !v.textOnly {
			if st, err := os.Stat(l.Path); err != nil {
				v.errorf(At("luns", i, "path"), "%v", err)
			} else if st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
				v.errorf(At("luns", i, "path"), "%s is not a block device", l.Path)
			}
		}
		if l.Size != 0 {
			v.errorf(At("luns", i, "size"), "a block device has its own size; remove size")
		}
		if l.Create {
			v.errorf(At("luns", i, "create"), "create applies to files only")
		}
	case "rbd":
		v.validateRBD(l, i)
	case "memory", "null":
		if l.Size == 0 {
			v.errorf(At("luns", i, "size"), "a %s backstore needs a size", l.Backstore)
		}
		if l.Backstore == "memory" {
			// A memory LUN allocates RAM as it is written: one bigger than the machine would
			// have the kernel's OOM killer end the daemon once initiators fill it.
			if ram, err := totalRAM(); err == nil && int64(l.Size) > ram {
				v.errorf(At("luns", i, "size"), "%v is more than this machine's RAM (%v): a memory LUN keeps all its data in RAM", l.Size, Size(ram))
			}
		}
		if l.AllowSharedFile {
			v.errorf(At("luns", i, "allow_shared_file"), "allow_shared_file applies to file and block backstores only")
		}
		if l.Path != "" {
			v.errorf(At("luns", i, "path"), "a %s backstore has no path", l.Backstore)
		}
		if l.Create {
			v.errorf(At("luns", i, "create"), "create applies to files only")
		}
	case "":
		v.errorf(At("luns", i), "backstore is missing (file, block, memory, null or rbd)")
	default:
		v.errorf(At("luns", i, "backstore"), "%q is not one of file, block, memory, null, rbd", l.Backstore)
	}
	if l.RBD != nil && l.Backstore != "rbd" {
		v.errorf(At("luns", i, "rbd"), "rbd applies to backstore: rbd only")
	}
	if l.Path != "" {
		clean := path.Clean(l.Path)
		if j, dup := paths[clean]; dup {
			v.errorf(At("luns", i, "path"), "%s is also used by luns[%d]", l.Path, j)
		}
		paths[clean] = i
	}
	for _, f := range []struct {
		key, val string
		max      int
	}{{"vendor", l.Vendor, 8}, {"product", l.Product, 16}, {"revision", l.Revision, 4}, {"serial", l.Serial, 64}} {
		if len(f.val) > f.max {
			v.errorf(At("luns", i, f.key), "%q is longer than %d characters", f.val, f.max)
		}
		for _, r := range f.val {
			if r < 0x20 || r > 0x7E {
				v.errorf(At("luns", i, f.key), "%q has a character that is not printable ASCII", f.val)
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
		v.warnf(At("luns"), "the %d memory LUNs hold %v together, more than this machine's RAM (%v): the daemon runs out of memory if initiators fill them", count, total, Size(ram))
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

// validateRBD checks an rbd backstore's settings.
func (v *validator) validateRBD(l *LUN, i int) {
	if l.RBD == nil || l.RBD.Image == "" {
		v.errorf(At("luns", i, "rbd", "image"), "an rbd backstore needs rbd: {image: NAME} (and pool, default %s)", rbd.DefaultPool)
		if l.RBD == nil {
			return
		}
	}
	r := l.RBD
	for _, f := range []struct{ key, val string }{{"pool", r.Pool}, {"namespace", r.Namespace}, {"image", r.Image}} {
		if strings.ContainsAny(f.val, "/@") || strings.ContainsFunc(f.val, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			v.errorf(At("luns", i, "rbd", f.key), "%q: a name has no /, @ or control characters", f.val)
		}
	}
	for _, f := range []struct{ key, val string }{{"ceph_conf", r.ConfFile}, {"keyring", r.Keyring}} {
		if f.val != "" && !filepath.IsAbs(f.val) {
			v.errorf(At("luns", i, "rbd", f.key), "%s is a relative path: write the whole path, from /", f.val)
		}
	}
	if r.ConfFile != "" && !v.textOnly {
		// A warning: the configuration may be checked on another host than the gateway.
		if _, err := os.Stat(r.ConfFile); err != nil && !errors.Is(err, fs.ErrPermission) {
			v.warnf(At("luns", i, "rbd", "ceph_conf"), "%v: serve cannot connect without it", err)
		}
	}
	for _, f := range []struct {
		key string
		val time.Duration
		max time.Duration
	}{
		{"rados_mount_timeout", r.MountTimeout, time.Hour},
		{"rados_osd_op_timeout", r.OSDOpTimeout, 10 * time.Minute},
		{"pr_lease", time.Duration(r.PRLease), time.Minute},
	} {
		if f.val < time.Second || f.val > f.max {
			v.errorf(At("luns", i, "rbd", f.key), "%s must be between 1s and %v, such as 20s", Duration(f.val), Duration(f.max))
		}
	}
	if r.PRStore != PRStoreRADOS && r.PRStore != PRStoreLocal {
		v.errorf(At("luns", i, "rbd", "pr_store"), "%q is not %s (the reservations shared by every gateway of the image) or %s (this daemon's own)", r.PRStore, PRStoreRADOS, PRStoreLocal)
	}
	if l.Path != "" {
		v.errorf(At("luns", i, "path"), "an rbd backstore has no path (rbd: {pool, image} name it)")
	}
	if l.Size != 0 {
		v.errorf(At("luns", i, "size"), "an RBD image has its own size; remove size (rbd resize changes it, online)")
	}
	if l.Create {
		v.errorf(At("luns", i, "create"), "create applies to files only (make the image with rbd create)")
	}
	if l.AllowSharedFile {
		v.errorf(At("luns", i, "allow_shared_file"), "allow_shared_file applies to file and block backstores only")
	}
	if !rbd.Built {
		v.warnf(At("luns", i, "backstore"), "this srptarget is built without RBD support: serve refuses this LUN (build with -tags rbd where librbd-dev is installed: make build does)")
	}
}

// validatePorts checks target.relative_port_id, target.ports and alua.
func (v *validator) validatePorts(c *Config) {
	rel := map[uint16]string{c.Target.RelativePortID: "target"}
	ids := map[uint64]int{}
	for i := range c.Target.Ports {
		p := &c.Target.Ports[i]
		if p.IDExt == "" {
			v.errorf(At("target", "ports", i, "id_ext"), "id_ext is missing: each target port needs its own")
		} else if n, err := ParseEUI64(p.IDExt); err != nil {
			v.errorf(At("target", "ports", i, "id_ext"), "%v", err)
		} else if j, dup := ids[n]; dup {
			v.errorf(At("target", "ports", i, "id_ext"), "same id_ext as target.ports[%d]", j)
		} else {
			ids[n] = i
		}
		if p.IOCGUID != "" {
			if _, err := ParseEUI64(p.IOCGUID); err != nil {
				v.errorf(At("target", "ports", i, "ioc_guid"), "%v", err)
			}
		}
		if p.RelativePortID == 0 {
			v.errorf(At("target", "ports", i, "relative_port_id"), "relative_port_id is missing or 0: each target port needs its own, 1 to 65535")
			continue
		}
		if who, dup := rel[p.RelativePortID]; dup {
			v.errorf(At("target", "ports", i, "relative_port_id"), "relative port %d is %s's already", p.RelativePortID, who)
		}
		rel[p.RelativePortID] = fmt.Sprintf("target.ports[%d]", i)
	}
	if c.ALUA == nil {
		return
	}
	if len(c.ALUA.Groups) == 0 {
		v.errorf(At("alua", "groups"), "no target port group: list at least one, or remove alua")
		return
	}
	inGroup := map[int]bool{}
	ok := true
	for i := range c.ALUA.Groups {
		g := &c.ALUA.Groups[i]
		if g.ID == nil {
			v.errorf(At("alua", "groups", i, "id"), "id is missing (a target port group number, 0 to 65535)")
			ok = false
		} else if *g.ID < 0 || *g.ID > math.MaxUint16 {
			v.errorf(At("alua", "groups", i, "id"), "%d is outside 0..65535", *g.ID)
			ok = false
		}
		if _, err := scsi.ParseAccessState(g.State); err != nil {
			v.errorf(At("alua", "groups", i, "state"), "%v", err)
			ok = false
		}
		if len(g.Ports) == 0 {
			v.errorf(At("alua", "groups", i, "ports"), "no relative target port listed")
			ok = false
		}
		for j, p := range g.Ports {
			if p < 1 || p > math.MaxUint16 {
				v.errorf(At("alua", "groups", i, "ports", j), "%d is outside 1..65535", p)
				ok = false
			}
			inGroup[p] = true
		}
	}
	for _, p := range c.LocalPorts() {
		if !inGroup[int(p)] {
			v.errorf(At("alua", "groups"), "relative target port %d (%s) is in no target port group", p, rel[p])
			ok = false
		}
	}
	if ok {
		if _, err := scsi.NewALUA(c.PortGroups()); err != nil {
			v.errorf(At("alua", "groups"), "%v", err)
		}
	}
}

// aclName is what an ACL's name may be: it is a metric label value and a word in the log.
var aclName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
