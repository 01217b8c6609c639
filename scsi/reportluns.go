package scsi

import "encoding/binary"

// SELECT REPORT values of REPORT LUNS (SPC-4 table 284).
const (
	selectReportLogicalUnits = 0x00 // every logical unit, no well-known ones
	selectReportWellKnown    = 0x01 // well-known logical units only
	selectReportAll          = 0x02 // both
)

// reportLUNs handles REPORT LUNS (SPC-4 6.33) through a logical unit or without one (lu nil).
// The list is the map the command came through, in LUN order, each LUN encoded as Linux
// addresses it; the only well-known logical unit is the REPORT LUNS one. LUN LIST LENGTH
// describes the whole list even when the allocation length cuts it short, so that the initiator
// can ask again with a larger buffer. Reporting the list clears REPORTED LUNS DATA HAS CHANGED for
// the nexus on every logical unit of the map.
func reportLUNs(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReportLUNs)) {
		return
	}
	sel := c.CDB[2]
	if sel > selectReportAll {
		c.invalidCDBField(2, -1)
		return
	}
	alloc := int(binary.BigEndian.Uint32(c.CDB[6:10]))
	if alloc < 16 {
		// SPC-4: room for the header and one LUN at least.
		c.invalidCDBField(6, -1)
		return
	}

	var mappings []Mapping
	if c.lunMap != nil {
		mappings = c.lunMap.mappings
	}
	lus := sel != selectReportWellKnown
	wlun := sel != selectReportLogicalUnits
	count := 0
	if lus {
		count = len(mappings)
		if count == 0 {
			// As LIO: an empty list would leave the initiator nothing to probe; LUN 0
			// answers INQUIRY with peripheral qualifier 011b.
			count = 1
		}
	}
	if wlun {
		count++
	}

	w := newDataInWriter(c, alloc)
	var b [8]byte
	binary.BigEndian.PutUint32(b[0:], uint32(count*8))
	w.write(b[:])
	if lus {
		if len(mappings) == 0 {
			binary.BigEndian.PutUint64(b[:], EncodeLUN(0))
			w.write(b[:])
		}
		for _, mp := range mappings {
			binary.BigEndian.PutUint64(b[:], EncodeLUN(mp.LUN))
			w.write(b[:])
		}
	}
	if wlun {
		binary.BigEndian.PutUint64(b[:], ReportLUNsWellKnownLUN)
		w.write(b[:])
	}
	w.finish()

	for _, mp := range mappings {
		mp.LU.clearUA(c.Nexus, ReasonReportedLUNsDataHasChanged)
	}
	if c.lunMap == nil && lu != nil {
		lu.clearUA(c.Nexus, ReasonReportedLUNsDataHasChanged)
	}
}
