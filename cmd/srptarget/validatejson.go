package main

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
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
	if errs := config.AsErrors(err); errs != nil {
		return errs
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
	Reload *control.ReloadResult `json:"reload,omitempty"`
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
