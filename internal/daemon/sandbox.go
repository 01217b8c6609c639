package daemon

// What the shipped systemd unit (configs/srptarget.service) lets the daemon see and write,
// for validate: a backstore or state directory outside it fails only once serve runs under the
// unit, with EROFS or ENOENT. validate runs outside the sandbox, so it names the paths instead.

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"github.com/srptarget/srptarget/config"
)

// UnitSandbox is the file system view of the unit: ProtectSystem=strict makes everything
// read-only but /dev, /proc, /sys and writable; ProtectHome=yes hides hidden.
type UnitSandbox struct {
	writable []string
	hidden   []string
	// dropIns are the drop-in files read (their ReadWritePaths= are in writable).
	dropIns []string
}

// UnitDropInDir is where `systemctl edit srptarget` writes its drop-ins.
var UnitDropInDir = "/etc/systemd/system/srptarget.service.d"

// ShippedSandbox is the shipped unit's view (StateDirectory=srptarget, RuntimeDirectory=,
// ProtectHome=yes, PrivateTmp=yes) plus the ReadWritePaths= and ReadOnlyPaths= of its
// drop-ins in dir.
func ShippedSandbox(dir string) UnitSandbox {
	sb := UnitSandbox{
		writable: []string{"/var/lib/srptarget", "/run/srptarget", "/dev"},
		hidden:   []string{"/home", "/root", "/run/user"},
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sb.dropIns = append(sb.dropIns, f)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
			if !ok {
				continue
			}
			switch strings.TrimSpace(key) {
			case "ReadWritePaths":
				for _, p := range strings.Fields(val) {
					// "-" ignores a missing path, "+" is relative to RootDirectory=.
					sb.writable = append(sb.writable, strings.TrimLeft(p, "-+"))
				}
			case "ProtectHome":
				if v := strings.TrimSpace(val); v == "no" || v == "false" {
					sb.hidden = nil
				}
			}
		}
		_ = fh.Close()
	}
	return sb
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// check returns a warning for each path of cfg the daemon would write (file backstores that
// are not read-only, the state directory) or read (every backstore path) that the unit hides
// or makes read-only.
func (sb UnitSandbox) Check(cfg *config.Config) []*config.Error {
	var warns []*config.Error
	fix := "add ReadWritePaths=%s in a drop-in (systemctl edit srptarget), or move it under /var/lib/srptarget"
	look := func(where []any, path string, write bool, dir string) {
		if path == "" {
			return
		}
		for _, h := range sb.hidden {
			if under(path, h) {
				warns = append(warns, cfg.ErrorAt(where, "%s is under %s, which the systemd unit hides from the daemon (ProtectHome=yes): move it, e.g. under /var/lib/srptarget", path, h))
				return
			}
		}
		if !write {
			return
		}
		for _, w := range sb.writable {
			if under(path, w) {
				return
			}
		}
		warns = append(warns, cfg.ErrorAt(where, "the systemd unit makes %s read-only for the daemon (ProtectSystem=strict): "+fix, path, dir))
	}
	for i, l := range cfg.LUNs {
		if l.Backstore == "file" {
			look(config.At("luns", i, "path"), l.Path, !l.ReadOnly, filepath.Dir(l.Path))
		}
	}
	look(config.At("state_dir"), cfg.StateDir, true, cfg.StateDir)
	return warns
}
