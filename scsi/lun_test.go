package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEncodeLUN(t *testing.T) {
	for _, tc := range []struct {
		n    uint16
		want uint64
	}{
		{0, 0x0000000000000000},
		{5, 0x0005000000000000},
		{255, 0x00FF000000000000},    // last peripheral device address
		{256, 0x4100000000000000},    // first flat space address
		{300, 0x412C000000000000},    // 012Ch
		{0x1234, 0x5234000000000000}, // 40h | 12h, 34h
		{MaxLUN, 0x7FFF000000000000},
	} {
		require.Equal(t, tc.want, EncodeLUN(tc.n), "LUN %d", tc.n)
		n, ok := DecodeLUN(tc.want)
		require.True(t, ok)
		require.Equal(t, tc.n, n)
	}
}

func TestDecodeLUN(t *testing.T) {
	for _, tc := range []struct {
		raw  uint64
		n    uint16
		ok   bool
		name string
	}{
		{0x0007000000000000, 7, true, "peripheral"},
		{0x4005000000000000, 5, true, "flat space addressing of a small LUN"},
		{0x4000000000000000, 0, true, "flat space LUN 0"},
		{0x0105000000000000, 0, false, "peripheral with bus identifier 1"},
		{0x8005000000000000, 0, false, "logical unit addressing"},
		{0xC101000000000000, 0, false, "REPORT LUNS well-known LUN"},
		{0xE000000000000000, 0, false, "extended addressing"},
		{0x0005000100000000, 0, false, "second level"},
		{0x0000000000000001, 0, false, "fourth level"},
		{0x4105000000000001, 0, false, "flat with trailing bytes"},
	} {
		n, ok := DecodeLUN(tc.raw)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.n, n, tc.name)
	}
}

// TestDecodeLUNEveryFirstLevel checks DecodeLUN against SAM-5's rules spelled out byte by
// byte, for every first level and with each later byte set.
func TestDecodeLUNEveryFirstLevel(t *testing.T) {
	ref := func(raw uint64) (uint16, bool) {
		var b [8]byte
		for i := range b {
			b[i] = byte(raw >> (56 - 8*i))
		}
		for _, x := range b[2:] {
			if x != 0 {
				return 0, false
			}
		}
		switch {
		case b[0] == 0: // peripheral device addressing, bus 0
			return uint16(b[1]), true
		case b[0]&0xC0 == 0x40: // flat space addressing
			return uint16(b[0]&0x3F)<<8 | uint16(b[1]), true
		}
		return 0, false
	}
	for first := uint64(0); first <= 0xFFFF; first++ {
		for _, tail := range []uint64{0, 1, 0xFF << 8, 1 << 40, 0x80 << 40} {
			raw := first<<48 | tail
			n, ok := DecodeLUN(raw)
			wn, wok := ref(raw)
			if n != wn || ok != wok {
				t.Fatalf("DecodeLUN(%#016x) = %d, %v; want %d, %v", raw, n, ok, wn, wok)
			}
		}
	}
}
