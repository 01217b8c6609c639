package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// The validator's checks of an rbd backstore.

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
