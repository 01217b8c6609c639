package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

func readCap10() []byte { return []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0} }

func readCap16(alloc uint32) []byte {
	return []byte{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, byte(alloc >> 24), byte(alloc >> 16), byte(alloc >> 8), byte(alloc), 0, 0}
}

// newNullMap maps a null backstore of blocks × blockSize bytes, for capacities too large for RAM.
func newNullMap(t *testing.T, blocks int64, blockSize uint32, thin bool) *LUNMap {
	t.Helper()
	bs, err := backstore.NewNull(blocks*int64(blockSize), blockSize)
	require.NoError(t, err)
	lu, err := NewLogicalUnit(Config{Backstore: bs, Serial: "null", ThinProvisioning: thin})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lu.Close() })
	m := newTestMap(t, lu)
	clearPowerOnUA(t, m, testNexus)
	return m
}

func TestReadCapacity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      func(t *testing.T) *LUNMap
		want10 []byte
		want16 []byte
	}{
		{"1000 blocks of 512 bytes", func(t *testing.T) *LUNMap { _, m := readyMap(t, nil); return m },
			[]byte{0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00}, zeros(16))},
		{"thin provisioning, unmapped blocks read zero", func(t *testing.T) *LUNMap {
			_, m := readyMap(t, func(cfg *Config) { cfg.ThinProvisioning = true })
			return m
		},
			[]byte{0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xC0, 0x00}, zeros(16))},
		{"thin provisioning, unmapped blocks undefined", func(t *testing.T) *LUNMap {
			_, m := readyMap(t, func(cfg *Config) {
				withGeometry(512, backstore.Capabilities{Unmap: true})(cfg)
				cfg.ThinProvisioning = true
			})
			return m
		},
			[]byte{0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x80, 0x00}, zeros(16))},
		{"8 logical blocks per physical block", func(t *testing.T) *LUNMap {
			_, m := readyMap(t, withGeometry(4096, backstore.Capabilities{}))
			return m
		},
			[]byte{0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00, 0x00, 0x03, 0x00, 0x00}, zeros(16))},
		{"4096-byte blocks", func(t *testing.T) *LUNMap {
			lu := newTestLU(t, 8, 4096, nil)
			m := newTestMap(t, lu)
			clearPowerOnUA(t, m, testNexus)
			return m
		},
			[]byte{0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x10, 0x00},
			cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00}, zeros(16))},
		{"last LBA FFFFFFFEh fits", func(t *testing.T) *LUNMap { return newNullMap(t, 0xFFFFFFFF, 512, false) },
			[]byte{0xFF, 0xFF, 0xFF, 0xFE, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFE, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00}, zeros(16))},
		{"2^32 + 10 blocks: READ CAPACITY(10) says FFFFFFFFh", func(t *testing.T) *LUNMap { return newNullMap(t, 1<<32+10, 512, true) },
			[]byte{0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x02, 0x00},
			cat([]byte{0, 0, 0, 0x01, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0xC0, 0x00}, zeros(16))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m(t)
			c := run(m, testNexus, 0, readCap10(), nil, 8)
			requireData(t, c, tc.want10, 8)
			c = run(m, testNexus, 0, readCap16(32), nil, 32)
			requireData(t, c, tc.want16, 32)
		})
	}
}

func TestReadCapacityLengths(t *testing.T) {
	_, m := readyMap(t, nil)
	want16 := cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00}, zeros(20))

	// READ CAPACITY(10) has no allocation length: 8 bytes, whatever the buffer.
	c := run(m, testNexus, 0, readCap10(), nil, 4)
	requireGood(t, c)
	require.Equal(t, []byte{0x00, 0x00, 0x03, 0xE7}, data(c))
	require.Equal(t, 8, c.TransferLength)
	c = run(m, testNexus, 0, readCap10(), nil, 512)
	requireData(t, c, []byte{0x00, 0x00, 0x03, 0xE7, 0x00, 0x00, 0x02, 0x00}, 8)
	over, n := c.DataInResidual()
	require.False(t, over)
	require.Equal(t, 504, n)

	for _, tc := range []struct {
		alloc    uint32
		want     []byte
		transfer int
	}{
		{0, []byte{}, 0},
		{12, want16[:12], 12},
		{32, want16, 32},
		{4096, want16, 32},
		{0xFFFFFFFF, want16, 32},
	} {
		c := run(m, testNexus, 0, readCap16(tc.alloc), nil, 64)
		requireData(t, c, tc.want, tc.transfer)
	}
}

func TestReadCapacityErrors(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []cdbCase{
		{"10: LBA without PMI", []byte{0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 2, -1},
		{"10: LBA with PMI", []byte{0x25, 0, 0, 0, 0, 1, 0, 0, 1, 0}, -1, 0},
		{"10: PMI without LBA", []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 1, 0}, -1, 0},
		{"10: RELADR (obsolete)", []byte{0x25, 0x01, 0, 0, 0, 0, 0, 0, 0, 0}, 1, 0},
		{"10: reserved byte 7", []byte{0x25, 0, 0, 0, 0, 0, 0, 0x10, 0, 0}, 7, 4},
		{"10: reserved bits of byte 8", []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0x02, 0}, 8, 1},
		{"16: LBA without PMI", []byte{0x9E, 0x10, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 2, -1},
		{"16: LBA with PMI", []byte{0x9E, 0x10, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 1, 0}, -1, 0},
		{"16: reserved bits of byte 1", []byte{0x9E, 0x30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 1, 5},
		{"16: reserved bits of byte 14", []byte{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0x80, 0}, 14, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, tc.cdb, nil, 32)
			requireCDBCase(t, c, tc)
			if tc.byteOff < 0 {
				last := data(c)[0:4] // RETURNED LOGICAL BLOCK ADDRESS
				if tc.cdb[0] == 0x9E {
					last = data(c)[4:8]
				}
				require.Equal(t, []byte{0x00, 0x00, 0x03, 0xE7}, last)
			}
		})
	}
}
