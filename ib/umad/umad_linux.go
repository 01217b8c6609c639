//go:build linux && cgo

package umad

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/srptarget/srptarget/ib/dm"
)

// The paths libibumad reads; umad2sim redirects the same ones.
const (
	sysMAD = "/sys/class/infiniband_mad"
	sysIB  = "/sys/class/infiniband"
	devDir = "/dev/infiniband"
)

func readFile(path string) (string, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var buf [256]C.char
	n := C.srpt_umad_read_file(cp, &buf[0], C.int(len(buf)))
	if n < 0 {
		return "", syscall.Errno(-n)
	}
	return strings.TrimSpace(C.GoString(&buf[0])), nil
}

func listDir(path string) ([]string, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	buf := make([]C.char, 1<<14)
	n := C.srpt_umad_list_dir(cp, &buf[0], C.int(len(buf)))
	if n < 0 {
		return nil, syscall.Errno(-n)
	}
	return strings.Fields(C.GoString(&buf[0])), nil
}

func hexValue(s string) uint64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	return v
}

// Ports lists the HCA ports that have a umad device, from sysfs as libibumad reads it.
func Ports() ([]PortInfo, error) {
	names, err := listDir(sysMAD)
	if err != nil {
		return nil, fmt.Errorf("umad: %s: %w (is ib_umad loaded?)", sysMAD, err)
	}
	var out []PortInfo
	for _, n := range names {
		num, ok := strings.CutPrefix(n, "umad")
		umad, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		ca, err1 := readFile(sysMAD + "/" + n + "/ibdev")
		port, err2 := readFile(sysMAD + "/" + n + "/port")
		pn, err3 := strconv.Atoi(port)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		p := PortInfo{CA: ca, Port: pn, Umad: umad}
		dir := fmt.Sprintf("%s/%s/ports/%d/", sysIB, ca, pn)
		lid, _ := readFile(dir + "lid")
		smLID, _ := readFile(dir + "sm_lid")
		capMask, _ := readFile(dir + "cap_mask")
		pkey, _ := readFile(dir + "pkeys/0")
		p.LID, p.SMLID = uint16(hexValue(lid)), uint16(hexValue(smLID))
		p.CapMask, p.PKey = uint32(hexValue(capMask)), uint16(hexValue(pkey))
		p.State, _ = readFile(dir + "state")
		p.LinkLayer, _ = readFile(dir + "link_layer")
		if g, err := readFile(dir + "gids/0"); err == nil {
			p.GID, _ = netip.ParseAddr(g)
		}
		out = append(out, p)
	}
	return out, nil
}

// Port is one GSI agent on one HCA port's umad device. Recv and Send may be called from
// different goroutines; each call blocks an OS thread in C (poll, read, write): umad2sim
// needs its I/O through libc.
type Port struct {
	fd    C.int
	agent uint32
	info  PortInfo

	mu     sync.Mutex
	closed bool
}

// Open registers an agent of class (version) on the port p. With methods it is a server of
// those methods: it receives the requests of that class the port gets (a Device Management
// agent: GET and SET). Without, it is a client that receives the responses to its own
// requests. The umad device needs root or a udev rule (it is 0600 root).
func Open(p PortInfo, class, version uint8, methods ...uint8) (*Port, error) {
	path := fmt.Sprintf("%s/umad%d", devDir, p.Umad)
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	fd := C.srpt_umad_open(cp)
	if fd < 0 {
		return nil, fmt.Errorf("umad: open %s (%s): %w", path, p.Name(), syscall.Errno(-fd))
	}
	var mp *C.uint8_t
	if len(methods) > 0 {
		mp = (*C.uint8_t)(unsafe.Pointer(&methods[0]))
	}
	id := C.srpt_umad_register(fd, C.int(class), C.int(version), mp, C.int(len(methods)))
	if id < 0 {
		C.srpt_umad_close(fd)
		e := syscall.Errno(-id)
		why := ""
		if e == syscall.EBUSY || e == syscall.EINVAL {
			why = " (another agent serves this class on the port: the kernel's ib_srpt, or another srptarget dm-agent)"
		}
		return nil, fmt.Errorf("umad: register class %#02x version %d on %s: %w%s", class, version, p.Name(), e, why)
	}
	return &Port{fd: fd, agent: uint32(id), info: p}, nil
}

// Info is the port the agent is on.
func (p *Port) Info() PortInfo { return p.info }

// Recv waits up to timeout for a MAD and copies it into mad (dm.MADSize bytes). status is
// the kernel's: ETIMEDOUT for a request of ours that got no response (mad then holds the
// request's header).
func (p *Port) Recv(mad []byte, timeout time.Duration) (Addr, syscall.Errno, error) {
	var buf [HdrSize + dm.MADSize]byte
	n := C.srpt_umad_recv(p.fd, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.int(len(buf)), C.int(timeout.Milliseconds()))
	switch {
	case n == -C.int(syscall.ETIMEDOUT):
		return Addr{}, 0, ErrTimeout
	case n < 0:
		return Addr{}, 0, fmt.Errorf("umad: read %s: %w", p.info.Name(), syscall.Errno(-n))
	case n < HdrSize:
		return Addr{}, 0, fmt.Errorf("umad: read %s: %d bytes", p.info.Name(), n)
	}
	h := userMADHdr(buf[:HdrSize])
	clear(mad[:dm.MADSize])
	copy(mad, buf[HdrSize:n])
	return h.addr(), syscall.Errno(h.status()), nil
}

// Send sends mad (dm.MADSize bytes) to a. A request waits timeout for its response, which
// Recv returns, retrying retries times; a response has timeout 0.
func (p *Port) Send(mad []byte, a Addr, timeout time.Duration, retries int) error {
	var buf [HdrSize + dm.MADSize]byte
	userMADHdr(buf[:HdrSize]).put(p.agent, uint32(timeout.Milliseconds()), uint32(retries), a)
	copy(buf[HdrSize:], mad[:dm.MADSize])
	n := C.srpt_umad_send(p.fd, (*C.uint8_t)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	if n < 0 {
		return fmt.Errorf("umad: write %s: %w", p.info.Name(), syscall.Errno(-n))
	}
	return nil
}

// Close closes the umad file, which unregisters the agent.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		C.srpt_umad_close(p.fd)
	}
	return nil
}
