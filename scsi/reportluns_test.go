package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func reportLUNsCDB(sel byte, alloc uint32) []byte {
	return []byte{0xA0, 0, sel, 0, 0, 0, byte(alloc >> 24), byte(alloc >> 16), byte(alloc >> 8), byte(alloc), 0, 0}
}

// newMap0_5_300 maps three logical units at LUNs 0, 5 and 300 (given out of order).
func newMap0_5_300(t *testing.T) (*LUNMap, [3]*LogicalUnit) {
	t.Helper()
	var lus [3]*LogicalUnit
	for i := range lus {
		lus[i] = newTestLU(t, 100, 512, nil)
	}
	m, err := NewLUNMap([]Mapping{{LUN: 300, LU: lus[2]}, {LUN: 0, LU: lus[0]}, {LUN: 5, LU: lus[1]}})
	require.NoError(t, err)
	return m, lus
}

var (
	lun0   = []byte{0x00, 0x00, 0, 0, 0, 0, 0, 0}
	lun5   = []byte{0x00, 0x05, 0, 0, 0, 0, 0, 0}
	lun300 = []byte{0x41, 0x2C, 0, 0, 0, 0, 0, 0} // flat space addressing: 40h | 01h, 2Ch
	wlunRL = []byte{0xC1, 0x01, 0, 0, 0, 0, 0, 0} // REPORT LUNS well-known logical unit
)

func TestReportLUNs(t *testing.T) {
	m, _ := newMap0_5_300(t)
	all := cat([]byte{0x00, 0x00, 0x00, 0x18, 0, 0, 0, 0}, lun0, lun5, lun300)
	for _, tc := range []struct {
		name     string
		lun      uint64
		cdb      []byte
		bufLen   int
		want     []byte
		transfer int
	}{
		{"select 0 (linux scan)", EncodeLUN(0), reportLUNsCDB(0, 4096), 4096, all, 32},
		{"select 1: well-known only", EncodeLUN(0), reportLUNsCDB(1, 4096), 4096,
			cat([]byte{0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0}, wlunRL), 16},
		{"select 2: all", EncodeLUN(0), reportLUNsCDB(2, 4096), 4096,
			cat([]byte{0x00, 0x00, 0x00, 0x20, 0, 0, 0, 0}, lun0, lun5, lun300, wlunRL), 40},
		{"through LUN 300", EncodeLUN(300), reportLUNsCDB(0, 4096), 4096, all, 32},
		{"through an unmapped LUN", EncodeLUN(7), reportLUNsCDB(0, 4096), 4096, all, 32},
		{"through the well-known LUN", ReportLUNsWellKnownLUN, reportLUNsCDB(0, 4096), 4096, all, 32},
		{"allocation of 16: LUN LIST LENGTH still counts all", EncodeLUN(0), reportLUNsCDB(0, 16), 4096, all[:16], 16},
		{"allocation of 20", EncodeLUN(0), reportLUNsCDB(0, 20), 4096, all[:20], 20},
		{"buffer smaller than the allocation", EncodeLUN(0), reportLUNsCDB(0, 4096), 20, all[:20], 32},
		{"large allocation", EncodeLUN(0), reportLUNsCDB(0, 0xFFFFFFFF), 64, all, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Command{Nexus: testNexus, LUN: tc.lun, CDB: tc.cdb, DataIn: make([]byte, tc.bufLen)}
			m.Execute(c)
			requireData(t, c, tc.want, tc.transfer)
		})
	}
}

func TestReportLUNsEmptyMap(t *testing.T) {
	m, err := NewLUNMap(nil)
	require.NoError(t, err)
	c := run(m, testNexus, 0, reportLUNsCDB(0, 4096), nil, 4096)
	requireData(t, c, cat([]byte{0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0}, lun0), 16)
	c = run(m, testNexus, 0, reportLUNsCDB(1, 4096), nil, 4096)
	requireData(t, c, cat([]byte{0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0}, wlunRL), 16)
	c = run(m, testNexus, 0, reportLUNsCDB(2, 4096), nil, 4096)
	requireData(t, c, cat([]byte{0x00, 0x00, 0x00, 0x10, 0, 0, 0, 0}, lun0, wlunRL), 24)
}

func TestReportLUNsManyLUNs(t *testing.T) {
	lu := newTestLU(t, 100, 512, nil)
	var mappings []Mapping
	for n := uint16(0); n <= MaxLUN; n += 64 {
		mappings = append(mappings, Mapping{LUN: n, LU: lu})
	}
	m, err := NewLUNMap(mappings)
	require.NoError(t, err)
	c := run(m, testNexus, 0, reportLUNsCDB(0, 0x10000), nil, 0x10000)
	requireGood(t, c)
	d := data(c)
	require.Len(t, d, 8+8*256)
	require.Equal(t, []byte{0x00, 0x00, 0x08, 0x00}, d[:4])
	require.Equal(t, []byte{0x00, 0x40, 0, 0, 0, 0, 0, 0}, d[8+8:8+16])        // LUN 64
	require.Equal(t, []byte{0x41, 0x00, 0, 0, 0, 0, 0, 0}, d[8+8*4:8+8*5])     // LUN 256
	require.Equal(t, []byte{0x7F, 0xC0, 0, 0, 0, 0, 0, 0}, d[8+8*255:8+8*256]) // LUN 16320
}

func TestReportLUNsErrors(t *testing.T) {
	m, _ := newMap0_5_300(t)
	for _, tc := range []cdbCase{
		{"select report 03h", reportLUNsCDB(3, 4096), 2, -1},
		{"select report 10h (administrative LU, SPC-5)", reportLUNsCDB(0x10, 4096), 2, -1},
		{"select report FFh", reportLUNsCDB(0xFF, 4096), 2, -1},
		{"allocation of 15", reportLUNsCDB(0, 15), 6, -1},
		{"allocation of 0", reportLUNsCDB(0, 0), 6, -1},
		{"reserved byte 1", []byte{0xA0, 0x01, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 1, 0},
		{"reserved byte 5", []byte{0xA0, 0, 0, 0, 0, 0x80, 0, 0, 0x10, 0, 0, 0}, 5, 7},
		{"reserved byte 10", []byte{0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0x04, 0}, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, lun := range []uint16{0, 9} {
				requireCDBCase(t, run(m, testNexus, lun, tc.cdb, nil, 4096), tc)
			}
		})
	}
}
