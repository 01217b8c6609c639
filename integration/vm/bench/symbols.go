package main

import (
	"bufio"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// kernelBase: a guest address at or above it is the kernel's (the upper half of x86-64's).
const kernelBase = 0xffff800000000000

// symTable is one object's functions, sorted by address.
type symTable struct {
	addr []uint64
	size []uint64 // 0: unknown (up to the next symbol)
	name []string
	obj  []string // the kernel's: the module, "" for vmlinux; nil for an ELF file's
}

func (t *symTable) sort() {
	idx := make([]int, len(t.addr))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return t.addr[idx[i]] < t.addr[idx[j]] })
	a, s, n := make([]uint64, len(idx)), make([]uint64, len(idx)), make([]string, len(idx))
	var o []string
	if t.obj != nil {
		o = make([]string, len(idx))
	}
	for i, k := range idx {
		a[i], s[i], n[i] = t.addr[k], t.size[k], t.name[k]
		if o != nil {
			o[i] = t.obj[k]
		}
	}
	t.addr, t.size, t.name, t.obj = a, s, n, o
}

// find returns the index of the function that holds a, -1 when none does.
func (t *symTable) find(a uint64) int {
	i := sort.Search(len(t.addr), func(i int) bool { return t.addr[i] > a }) - 1
	if i < 0 || (t.size[i] > 0 && a >= t.addr[i]+t.size[i]) {
		return -1
	}
	return i
}

// lookup returns the function that holds a, or "" when none does.
func (t *symTable) lookup(a uint64) string {
	if i := t.find(a); i >= 0 {
		return t.name[i]
	}
	return ""
}

// mapping is one executable mapping of the daemon: [start, end) of the file at offset.
type mapping struct {
	start, end, off uint64
	object          string // the file's base name
	syms            *symTable
	bias            uint64 // ELF address = guest address + bias (mod 2^64)
}

// symbols name the blocks' start addresses.
type symbols struct {
	kernel   symTable
	maps     []mapping
	events   map[uint64]string // eventFuncs' entry addresses → label
	syscalls map[uint64]string // __x64_sys_NAME's address → NAME
}

// name returns the function and object that the code at guest address a belongs to.
func (s *symbols) name(a uint64) funcKey {
	if a >= kernelBase {
		i := s.kernel.find(a)
		if i < 0 {
			return funcKey{"(kernel, no symbol)", "vmlinux"}
		}
		obj := "vmlinux"
		if s.kernel.obj[i] != "" {
			obj = s.kernel.obj[i]
		}
		return funcKey{s.kernel.name[i], obj}
	}
	for _, m := range s.maps {
		if a < m.start || a >= m.end {
			continue
		}
		if m.syms != nil {
			if n := m.syms.lookup(a + m.bias); n != "" {
				return funcKey{n, m.object}
			}
		}
		return funcKey{"(" + m.object + ", no symbol)", m.object}
	}
	return funcKey{"(other processes)", "user"}
}

// loadSymbols reads the kernel's symbols, the daemon's mappings and the ELF symbols of the
// daemon and of the libraries that are under o.root.
func loadSymbols(o funcOptions) (*symbols, error) {
	s := &symbols{events: map[uint64]string{}, syscalls: map[uint64]string{}}
	if err := s.readKallsyms(o.ksyms); err != nil {
		return nil, err
	}
	if o.maps == "" {
		return s, nil
	}
	f, err := os.Open(o.maps)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cache := map[string]*symTable{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fl[0], "-")
		if !ok {
			continue
		}
		var m mapping
		var err1, err2, err3 error
		m.start, err1 = strconv.ParseUint(lo, 16, 64)
		m.end, err2 = strconv.ParseUint(hi, 16, 64)
		m.off, err3 = strconv.ParseUint(fl[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("%s: bad line %q", o.maps, sc.Text())
		}
		path := fl[5]
		m.object = filepath.Base(path)
		host := ""
		switch {
		case path == daemonPath:
			host, m.object = o.bin, "srptarget"
		case strings.HasPrefix(path, "/") && o.root != "":
			host = filepath.Join(o.root, path)
		}
		if host != "" {
			t, ok := cache[host]
			if !ok {
				t = elfSymbols(host)
				cache[host] = t
			}
			if t != nil {
				m.syms = t
				m.bias = elfBias(host, m.start, m.off)
			}
		}
		s.maps = append(s.maps, m)
	}
	return s, sc.Err()
}

// readKallsyms reads "address type name [module]" lines, gzip-compressed.
func (s *symbols) readKallsyms(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	addrOf := map[string]uint64{}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 3 {
			continue
		}
		a, err := strconv.ParseUint(fl[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		name := fl[2]
		s.kernel.addr = append(s.kernel.addr, a)
		s.kernel.size = append(s.kernel.size, 0)
		s.kernel.name = append(s.kernel.name, name)
		mod := ""
		if len(fl) > 3 {
			mod = strings.Trim(fl[3], "[]")
		}
		s.kernel.obj = append(s.kernel.obj, mod)
		if _, ok := addrOf[name]; !ok {
			addrOf[name] = a
		}
		if sc, ok := strings.CutPrefix(name, "__x64_sys_"); ok {
			s.syscalls[a] = sc
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(s.kernel.addr) == 0 {
		return fmt.Errorf("%s: no symbols", path)
	}
	s.kernel.sort()
	for _, e := range eventFuncs {
		for _, n := range strings.Split(e.names, "|") {
			if a, ok := addrOf[n]; ok {
				s.events[a] = e.label
				break
			}
		}
	}
	return nil
}

// elfSymbols returns the functions of an ELF file (its symbol table, else its dynamic
// symbols: Debian's libraries are stripped), nil when it cannot be read.
func elfSymbols(path string) *symTable {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, err = f.DynamicSymbols()
		if err != nil {
			return nil
		}
	}
	t := &symTable{}
	for _, y := range syms {
		if elf.ST_TYPE(y.Info) != elf.STT_FUNC || y.Value == 0 {
			continue
		}
		t.addr = append(t.addr, y.Value)
		t.size = append(t.size, y.Size)
		t.name = append(t.name, y.Name)
	}
	if len(t.addr) == 0 {
		return nil
	}
	t.sort()
	return t
}

// elfBias returns what turns a guest address in a mapping of path (at start, of the file at
// off) into the file's ELF address: the load segment that holds off says where the file's
// offsets sit in its address space. A non-PIE executable gets 0 (its segments load at their
// addresses).
func elfBias(path string, start, off uint64) uint64 {
	f, err := elf.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			// ELF address of the mapping's start: p.Vaddr + (off - p.Off)
			return p.Vaddr + (off - p.Off) - start
		}
	}
	return 0
}
