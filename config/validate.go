package config

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/srptarget/srptarget/ib"
)

// validator collects what is wrong (errs) and what is questionable (warns) in one
// configuration, each at its YAML path; a check of each part of the file has its own method.
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

	v.validateListeners(c)

	v.validateLimits(&c.Limits)

	luns := map[int]int{}
	paths := map[string]int{}
	for i := range c.LUNs {
		v.validateLUN(c, i, luns, paths)
	}
	v.checkMemoryTotal(c)
	v.checkSerials(c)

	v.validateACLs(c, luns)
}

// validateListeners checks listeners: each kind's settings, and that no two listen on the
// same address and port.
func (v *validator) validateListeners(c *Config) {
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
}

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
