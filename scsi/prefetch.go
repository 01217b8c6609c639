package scsi

// PRE-FETCH(10/16) (SBC-3 5.9, 5.10).

// usagePreFetch10 and usagePreFetch16: IMMED (byte 1 bit 1), the LOGICAL BLOCK ADDRESS, the
// GROUP NUMBER and the PREFETCH LENGTH. Byte 1 bit 0 is obsolete (RELADR) and the rest of
// byte 1 reserved.
var (
	usagePreFetch10 = blockUsage(opPreFetch10, 0x02, 10)
	usagePreFetch16 = blockUsage(opPreFetch16, 0x02, 16)
)

// preFetch10 and preFetch16 are PRE-FETCH(10/16): the range is checked (an LBA, or LBA plus
// PREFETCH LENGTH, past the end is LOGICAL BLOCK ADDRESS OUT OF RANGE; a length of zero means
// to the end of the medium) and nothing is read. The device server has no cache of its own to
// fill: the backstore's page cache, when there is one, fills itself on the next read. SBC-3
// answers GOOD, rather than CONDITION MET, when the blocks do not all fit in the cache, which
// with no cache is the honest answer, with IMMED set or not.
func preFetch10(lu *LogicalUnit, c *Command) { lu.preFetch(c, usagePreFetch10) }
func preFetch16(lu *LogicalUnit, c *Command) { lu.preFetch(c, usagePreFetch16) }

func (lu *LogicalUnit) preFetch(c *Command, usage []byte) {
	if c.failOn(checkCDBUsage(c.CDB, usage)) {
		return
	}
	b, f := decodeBlockCDB(c.CDB)
	if c.failOn(f) {
		return
	}
	if !lu.lbaInRange(b.lba, uint64(b.blocks)) {
		c.fail(ReasonLBAOutOfRange)
	}
}
