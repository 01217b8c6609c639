package checks

import (
	"os"
	"regexp"
	"strconv"
	"strings"
)

// multipathConf groups the paths by ALUA priority, the WWID read from sysfs: the file
// guest/multipath.conf, which run-vm.sh puts in every guest (lib.sh's mpath_setup uses it too).
const multipathConf = "/lab/multipath.conf"

var mapLine = regexp.MustCompile(`(?m)^(\S+) .* dm-[0-9]+ `)

// Multipath makes one dm-multipath map over disks without udev or multipathd (the VM has
// neither): libdevmapper makes the /dev/mapper nodes itself (DM_DISABLE_UDEV), and multipath
// lists only block devices udev has initialized (libudev's match_is_initialized), which is
// when udev's database has an entry for them: Multipath writes one per disk. The hardware
// handler is the one the kernel attached (retain_attached_hw_handler, the default). It returns
// `multipath -ll` and the map's name, "" without one; the caller checks the map.
func (l *Lab) Multipath(disks ...string) (ll, name string, err error) {
	if err := os.MkdirAll("/etc/multipath", 0o755); err != nil {
		return "", "", err
	}
	conf, err := os.ReadFile(multipathConf)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile("/etc/multipath.conf", conf, 0o644); err != nil {
		return "", "", err
	}
	os.Setenv("DM_DISABLE_UDEV", "1")
	if err := os.MkdirAll("/run/udev/data", 0o755); err != nil {
		return "", "", err
	}
	for _, d := range disks {
		if err := os.WriteFile("/run/udev/data/b"+readTrim("/sys/block/"+d+"/dev"), []byte("I:1\n"), 0o644); err != nil {
			return "", "", err
		}
	}
	l.Run("multipath", "-v2")
	// (multipath warns first that multipathd is not running)
	ll = l.Run("multipath", "-ll").Text
	if m := mapLine.FindStringSubmatch(ll); m != nil {
		name = m[1]
	}
	return ll, name, nil
}

// InPathGroup says whether `multipath -ll` lists disk under the path group of priority prio.
func InPathGroup(ll string, prio int, disk string) bool {
	in := false
	for _, line := range strings.Split(ll, "\n") {
		if strings.Contains(line, "prio=") {
			in = strings.Contains(line+" ", "prio="+strconv.Itoa(prio)+" ")
			continue
		}
		if in && strings.Contains(line, " "+disk+" ") {
			return true
		}
	}
	return false
}
