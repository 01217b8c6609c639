package scsi

import "encoding/binary"

// MaxLUN is the largest LUN this package addresses: flat space addressing has 14 bits.
const MaxLUN = 0x3FFF

// Address methods of the first level of a SAM-5 eight-byte LUN (byte 0 bits 7:6).
const (
	lunAddressPeripheral = 0x00
	lunAddressFlat       = 0x40
)

// ReportLUNsWellKnownLUN is the REPORT LUNS well-known logical unit (SPC-4 8.2), addressed as
// C1 01 00 00 00 00 00 00.
const ReportLUNsWellKnownLUN = 0xC101000000000000

// EncodeLUN returns the eight-byte SAM-5 LUN for n as Linux addresses it: peripheral device
// addressing below 256, flat space addressing above.
func EncodeLUN(n uint16) uint64 {
	var b [8]byte
	if n < 256 {
		b[1] = byte(n)
	} else {
		b[0] = lunAddressFlat | byte(n>>8)&0x3F
		b[1] = byte(n)
	}
	return binary.BigEndian.Uint64(b[:])
}

// DecodeLUN turns an eight-byte SAM-5 LUN (as a big-endian uint64) into a LUN number. It accepts
// single-level peripheral (bus 0) and flat space addresses; ok is false for anything else,
// including the well-known LUNs, which the caller handles first.
func DecodeLUN(raw uint64) (n uint16, ok bool) {
	// Bytes 2-7 (the second to fourth levels) must be zero; the first level is bytes 0-1.
	if raw&(1<<48-1) != 0 {
		return 0, false
	}
	first := uint16(raw >> 48)
	switch first >> 8 & 0xC0 {
	case lunAddressPeripheral:
		if first>>8 != 0 { // bus identifier must be 0 for a single-level LUN
			return 0, false
		}
		return first, true
	case lunAddressFlat:
		return first & MaxLUN, true
	}
	return 0, false
}
