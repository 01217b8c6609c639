package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/srptarget/srptarget/config"
)

// configIssue is one error or warning of a configuration file, for validate --json: where it
// is (line 0: unknown or the whole file; key: the key path, luns[1].size) and what.
type configIssue struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
}

func configIssues(errs []*config.Error) []configIssue {
	out := make([]configIssue, 0, len(errs))
	for _, e := range errs {
		out = append(out, configIssue{File: e.File, Line: e.Line, Key: e.Path, Message: e.Msg})
	}
	return out
}

// configErrorList is every error of a configuration that failed to load; an error that is
// not a configuration error (the file cannot be read) is one without a line.
func configErrorList(file string, err error) []*config.Error {
	var errs config.Errors
	var one *config.Error
	switch {
	case errors.As(err, &errs):
		return errs
	case errors.As(err, &one):
		return []*config.Error{one}
	}
	return []*config.Error{{File: file, Msg: err.Error()}}
}

// validateResult is what validate --json prints: whether the file is valid, its errors and
// warnings, the settings in effect (as validate's summary), and with --diff what a reload
// with it would change in the running daemon.
type validateResult struct {
	File     string        `json:"file"`
	Valid    bool          `json:"valid"`
	Errors   []configIssue `json:"errors"`
	Warnings []configIssue `json:"warnings"`
	// Target is the configured identity; nil when it comes from the first RDMA device.
	Target    *validateTarget `json:"target"`
	Listeners []string        `json:"listeners"`
	LUNs      []validateLUN   `json:"luns"`
	ACLs      []validateACL   `json:"acls"`
	// Reload is the running daemon's dry run of this file (--diff).
	Reload *reloadResult `json:"reload,omitempty"`
}

type validateTarget struct {
	IDExt   string `json:"id_ext"`
	IOCGUID string `json:"ioc_guid"`
}

type validateLUN struct {
	LUN       int    `json:"lun"`
	Backstore string `json:"backstore"`
	Path      string `json:"path,omitempty"`
	Size      uint64 `json:"size"`
	BlockSize int    `json:"block_size"`
	ReadOnly  bool   `json:"read_only"`
	Serial    string `json:"serial,omitempty"`
}

type validateACL struct {
	Index      int      `json:"index"`
	Initiators []string `json:"initiators"`
	Sources    []string `json:"sources"`
	LUNs       []int    `json:"luns"`
	ReadOnly   bool     `json:"read_only"`
}

// newValidateResult describes a configuration that loaded (err nil), with warns the
// warnings validate adds (the systemd unit's sandbox), or the errors of one that did not.
func newValidateResult(file string, cfg *config.Config, err error, warns []*config.Error) *validateResult {
	r := &validateResult{File: file, Errors: []configIssue{}, Warnings: []configIssue{},
		Listeners: []string{}, LUNs: []validateLUN{}, ACLs: []validateACL{}}
	if err != nil {
		r.Errors = configIssues(configErrorList(file, err))
		return r
	}
	r.Valid = true
	r.Warnings = configIssues(append(cfg.AllWarnings(), warns...))
	if cfg.Target.Configured() {
		if idExt, iocGUID, err := cfg.Target.Identity(); err == nil {
			r.Target = &validateTarget{IDExt: fmt.Sprintf("%016x", idExt), IOCGUID: fmt.Sprintf("%016x", iocGUID)}
		}
	}
	for _, l := range cfg.Listeners {
		addr, _ := config.ParseListenAddress(l.Address)
		r.Listeners = append(r.Listeners, netip.AddrPortFrom(addr, l.Port).String())
	}
	for _, l := range cfg.LUNs {
		vl := validateLUN{LUN: *l.LUN, Backstore: string(l.Backstore), Path: l.Path, Size: uint64(l.Size),
			BlockSize: l.BlockSize, ReadOnly: l.ReadOnly, Serial: l.Serial}
		if l.RBD != nil {
			vl.Path = l.RBD.ImageName()
		}
		r.LUNs = append(r.LUNs, vl)
	}
	slices.SortFunc(r.LUNs, func(a, b validateLUN) int { return a.LUN - b.LUN })
	for i, a := range cfg.ACLs {
		r.ACLs = append(r.ACLs, validateACL{Index: i, Initiators: nonNil(a.Initiators), Sources: nonNil(a.Sources),
			LUNs: nonNil(a.LUNs), ReadOnly: a.ReadOnly})
	}
	return r
}

// nonNil makes an empty list print as [] rather than null: a list is a list in the JSON
// whatever it holds.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// loginLineResult is what login-line --json prints: the target's identity and, for each
// target port and listener, the add_target line an initiator writes.
type loginLineResult struct {
	IDExt   string      `json:"id_ext"`
	IOCGUID string      `json:"ioc_guid"`
	From    string      `json:"from"`
	Logins  []loginLine `json:"logins"`
}

type loginLine struct {
	IDExt        string `json:"id_ext"`
	IOCGUID      string `json:"ioc_guid"`
	RelativePort uint16 `json:"relative_port"`
	// Listener is the listener's address and port, or for an ib listener "ib:PORT".
	Listener string `json:"listener"`
	// Dest is the dest= value of an address listener; <address>, <if> are for the operator
	// to fill in (Note).
	Dest string `json:"dest,omitempty"`
	// DGID, PKey and ServiceID are those of an ib listener's line; "<gid>" when this host
	// has no port to name (Note).
	DGID      string `json:"dgid,omitempty"`
	PKey      string `json:"pkey,omitempty"`
	ServiceID string `json:"service_id,omitempty"`
	Note      string `json:"note,omitempty"`
	Command   string `json:"command"`
}

func newLoginLineResult(cfg *config.Config, id identity, ifaces interfacesFunc, devices devicesFunc) *loginLineResult {
	r := &loginLineResult{IDExt: fmt.Sprintf("%016x", id.idExt), IOCGUID: fmt.Sprintf("%016x", id.iocGUID), From: id.from, Logins: []loginLine{}}
	lines := addTargetLines(cfg, id, ifaces)
	ibLines := ibTargetLines(cfg, devices)
	add := func(pid identity, rel uint16) {
		base := loginLine{IDExt: fmt.Sprintf("%016x", pid.idExt), IOCGUID: fmt.Sprintf("%016x", pid.iocGUID), RelativePort: rel}
		for _, l := range lines {
			ll := base
			ll.Listener, ll.Dest, ll.Note, ll.Command = l.listener.String(), l.dest, l.note, l.command(pid)
			r.Logins = append(r.Logins, ll)
		}
		for _, t := range ibLines {
			ll := base
			ll.Listener, ll.DGID, ll.Note, ll.Command = fmt.Sprintf("ib:%d", t.port), t.dgid, t.note, t.command(pid)
			ll.PKey, ll.ServiceID = fmt.Sprintf("%04x", t.pkey), fmt.Sprintf("%016x", t.serviceID)
			r.Logins = append(r.Logins, ll)
		}
	}
	add(id, cmp.Or(cfg.Target.RelativePortID, 1))
	for _, p := range cfg.Target.Ports {
		add(portIdentity(p, id), p.RelativePortID)
	}
	return r
}

// MarshalJSON gives the node GUID as ibv_devinfo prints it (0002:c903:00a0:b0c1): a 64-bit
// number does not survive a JSON reader that holds numbers as doubles.
func (d rdmaDevice) MarshalJSON() ([]byte, error) {
	type plain rdmaDevice
	return json.Marshal(struct {
		plain
		NodeGUID string `json:"node_guid"`
	}{plain(d), formatGUID(d.NodeGUID)})
}
