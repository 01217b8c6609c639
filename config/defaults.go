package config

import (
	"slices"
)

// ApplyDefaults fills every setting the file leaves out (zero) with its default, in place. It
// never rejects anything: a value out of range stays as written, for Validate to report, and
// a default that depends on another setting (buffer_pool_size on max_transfer_size) takes it
// as written. It is idempotent. Parse calls it between decoding and validation; a program that
// builds a Config itself calls it before Validate and before using the Config.
func (c *Config) ApplyDefaults() {
	if c.StateDir == "" {
		c.StateDir = StateDir
	}
	if c.Target.RelativePortID == 0 {
		c.Target.RelativePortID = DefaultRelativePortID
	}
	c.Limits.applyDefaults()
	for i := range c.LUNs {
		c.LUNs[i].applyDefaults()
	}
}

// applyDefaults fills the block size of every backstore but block (a block device has its
// own) and the pool and timeouts of an rbd image.
func (l *LUN) applyDefaults() {
	if l.BlockSize == 0 && l.Backstore != "block" {
		l.BlockSize = DefaultBlockSize
	}
	if r := l.RBD; r != nil {
		r.Options = r.Options.WithDefaults()
		if r.PRStore == "" {
			r.PRStore = PRStoreRADOS
		}
		if r.PRLease == 0 {
			r.PRLease = Duration(DefaultRBDPRLease)
		}
	}
}

// withDefaults returns a copy of c with its defaults applied, c unchanged: what ApplyDefaults
// writes (the limits, the LUNs and their rbd settings) is copied, the rest shared.
func (c *Config) withDefaults() *Config {
	d := *c
	d.LUNs = slices.Clone(c.LUNs)
	for i := range d.LUNs {
		if r := d.LUNs[i].RBD; r != nil {
			rc := *r
			d.LUNs[i].RBD = &rc
		}
	}
	d.ApplyDefaults()
	return &d
}
