package scsi

// ForgetNexus drops what the logical unit remembers of nexus n (its pending unit attentions),
// once the transport has forgotten the nexus for good: a target that bounds the nexuses it
// keeps must not keep their state here either. A nexus that comes back afterwards is new to
// the logical unit and gets POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (SAM-5 6.3), which
// covers whatever it missed. n must have no command in the logical unit.
func (lu *LogicalUnit) ForgetNexus(n *Nexus) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.nexuses.forgetLocked(n)
}

// ForgetNexus forgets nexus n on every logical unit of the map (LogicalUnit.ForgetNexus).
func (m *LUNMap) ForgetNexus(n *Nexus) {
	for _, mp := range m.mappings {
		mp.LU.ForgetNexus(n)
	}
}
