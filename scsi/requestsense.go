package scsi

// requestSense handles REQUEST SENSE (SPC-4 6.39). Sense data of failed commands travels with
// their status (autosense), so what is left to report here is a pending unit attention, which
// REQUEST SENSE returns as its parameter data and clears, a sanitize operation in progress (NOT
// READY, SANITIZE IN PROGRESS with its PROGRESS INDICATION, SBC-4 4.32.1) or that failed, or NO
// SENSE. The DESC bit picks the
// format. Without a logical unit (lu nil) an incorrect LUN answers LOGICAL UNIT NOT SUPPORTED as
// parameter data and the REPORT LUNS well-known logical unit NO SENSE; the status is GOOD.
func requestSense(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageRequestSense)) {
		return
	}
	descriptor := c.CDB[1]&0x01 != 0
	alloc := int(c.CDB[4])
	reason := ReasonNone
	var info SenseInfo
	switch {
	case lu != nil:
		reason = lu.takeUA(c.Nexus)
		if reason == ReasonNone {
			// A sanitize in progress reports its progress; one that failed says so.
			reason, info = lu.sanitizeBlocked()
		}
		if st, ok := lu.accessState(c); ok && reason == ReasonNone {
			// Through a port that cannot reach the medium, the sense data says why
			// (SPC-4 5.15.2.4.4 to 5.15.2.4.6); ReasonNone in the active states.
			reason, _ = st.notAccessible()
		}
	case c.LUN != ReportLUNsWellKnownLUN:
		reason = ReasonLogicalUnitNotSupported
	}
	var buf [MaxSenseLength]byte
	n := BuildSense(buf[:], descriptor, reason, info)
	c.putDataIn(buf[:n], alloc)
}
