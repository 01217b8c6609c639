package config

import (
	"fmt"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The validator's checks of one LUN, and of the memory LUNs together.

// validateLUN checks luns[i]: its number (luns holds those before it), block sizes, path
// (paths holds those before it), the settings of its kind of backstore and its inquiry strings.
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
		v.validateFileLUN(l, i)
	case "block":
		v.validateBlockLUN(l, i)
	case "rbd":
		v.validateRBD(l, i)
	case "memory", "null":
		v.validateMemoryLUN(l, i)
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

// validateMemoryLUN checks a memory or null backstore: a size and nothing else, and for
// memory no more than RAM.
func (v *validator) validateMemoryLUN(l *LUN, i int) {
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
}
