package scsi

// START STOP UNIT (SBC-3). The medium is not removable and is always ready, so the command
// has little to do, but it checks its fields as a disk would:
//
//   - byte 1 bit 0 IMMED is accepted (the answer comes when the work is done);
//   - POWER CONDITION must be 0h (START_VALID): there are no power conditions (no power
//     condition mode page), and then the POWER CONDITION MODIFIER must be zero too;
//   - LOEJ must be zero: there is no medium to load or eject (RMB is 0);
//   - START=1 is a no-op; START=0 "stops" the unit, which here only means writing the cache to
//     the medium first unless NO_FLUSH is set. The medium stays ready afterwards: an initiator
//     that stops a unit (sd only does so on shutdown for disks it manages) and keeps using it
//     gets its data rather than NOT READY.
func startStopUnit(lu *LogicalUnit, c *Command) {
	const (
		start   = 0x01
		noFlush = 0x04
	)
	cdb := c.CDB
	if c.failOn(checkZeroFields(cdb, startStopZero)) {
		return
	}
	if cdb[4]&start == 0 && cdb[4]&noFlush == 0 {
		if err := lu.bs.Flush(); err != nil {
			c.flushError(err)
		}
	}
}

// startStopZero are the fields of START STOP UNIT that must be zero, in the order they are
// checked: the reserved bits 7:1 of byte 1, the reserved byte 2, the reserved bits 7:4 of byte 3,
// POWER CONDITION, POWER CONDITION MODIFIER, the reserved bit 3 of byte 4, and LOEJ.
var startStopZero = []cdbField{{1, 0xFE}, {2, 0xFF}, {3, 0xF0}, {4, 0xF0}, {3, 0x0F}, {4, 0x08},
	{4, 0x02}}
