package scsi

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

// geometryStore changes the physical block size and the capabilities a backstore reports.
type geometryStore struct {
	backstore.Backstore
	pbs  uint32
	caps backstore.Capabilities
}

func (g *geometryStore) PhysicalBlockSize() uint32            { return g.pbs }
func (g *geometryStore) Capabilities() backstore.Capabilities { return g.caps }

// withGeometry wraps the test LU's memory backstore.
func withGeometry(pbs uint32, caps backstore.Capabilities) func(*Config) {
	return func(cfg *Config) {
		cfg.Backstore = &geometryStore{Backstore: cfg.Backstore, pbs: pbs, caps: caps}
	}
}

func vpdCDB(page byte, alloc uint16) []byte {
	return []byte{0x12, 0x01, page, byte(alloc >> 8), byte(alloc), 0}
}

// scsiNameTestPort is testPort's name as the SCSI NAME STRING field holds it: 34 characters,
// the terminator and one byte of padding.
var scsiNameTestPort = cat([]byte("0x0002c90300a0b0c10002c90300a0b0c1"), []byte{0, 0})

// devIDTestLU is VPD page 0x83 of the default test LU through testPort.
var devIDTestLU = cat(
	[]byte{0x00, 0x83, 0x00, 0x74},
	// NAA IEEE Registered Extended: code set binary, LU, type 3, length 16; NAA 6, company
	// 00 14 05, then the digits a1b2c3d40001 of the serial number "a1b2c3d4-0001".
	[]byte{0x01, 0x03, 0x00, 0x10},
	[]byte{0x60, 0x01, 0x40, 0x5A, 0x1B, 0x2C, 0x3D, 0x40, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
	// T10 vendor ID: ASCII, LU, type 1, length 36.
	[]byte{0x02, 0x01, 0x00, 0x24},
	[]byte("SRPTGT  srptarget disk:a1b2c3d4-0001"),
	// Relative target port 1: binary, target port, type 4.
	[]byte{0x01, 0x14, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01},
	// Target port group 0: binary, target port, type 5.
	[]byte{0x01, 0x15, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00},
	// SCSI name string: UTF-8, target port, type 8, length 36.
	[]byte{0x03, 0x18, 0x00, 0x24},
	scsiNameTestPort,
)

func TestVPDPages(t *testing.T) {
	thin := func(cfg *Config) { cfg.ThinProvisioning = true }
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		page byte
		want []byte
	}{
		{"supported pages", nil, 0x00,
			[]byte{0x00, 0x00, 0x00, 0x07, 0x00, 0x80, 0x83, 0x86, 0x8F, 0xB0, 0xB1}},
		{"supported pages, thin", thin, 0x00,
			[]byte{0x00, 0x00, 0x00, 0x08, 0x00, 0x80, 0x83, 0x86, 0x8F, 0xB0, 0xB1, 0xB2}},
		{"extended inquiry data", nil, 0x86, cat(
			[]byte{0x00, 0x86, 0x00, 0x3C},
			[]byte{0x00}, // no protection information
			[]byte{0x07}, // HEADSUP, ORDSUP, SIMPSUP
			[]byte{0x01}, // V_SUP
			zeros(5),     // bytes 7-11: P_I_I_SUP, LUICLR, R_SUP, CBCS, microcode, self-test minutes: 0
			[]byte{0x00}, // POA_SUP, HRA_SUP, VSA_SUP
			[]byte{32},   // MAXIMUM SUPPORTED SENSE DATA LENGTH
			zeros(50),
		)},
		{"unit serial number", nil, 0x80,
			cat([]byte{0x00, 0x80, 0x00, 0x0D}, []byte("a1b2c3d4-0001"))},
		{"device identification", nil, 0x83, devIDTestLU},
		{"block limits", nil, 0xB0, cat(
			[]byte{0x00, 0xB0, 0x00, 0x3C},
			[]byte{0x00, 0xFF},                         // WSNZ 0; MAXIMUM COMPARE AND WRITE LENGTH 255
			[]byte{0x00, 0x01},                         // OPTIMAL TRANSFER LENGTH GRANULARITY
			[]byte{0x00, 0x00, 0x00, 0x00},             // MAXIMUM TRANSFER LENGTH: no limit
			[]byte{0x00, 0x00, 0x00, 0x00},             // OPTIMAL TRANSFER LENGTH: not reported
			zeros(4),                                   // MAXIMUM PREFETCH LENGTH
			zeros(16),                                  // unmap fields: no thin provisioning
			[]byte{0, 0, 0, 0, 0x00, 0x20, 0x00, 0x00}, // MAXIMUM WRITE SAME LENGTH 1 GiB / 512
			[]byte{0x00, 0x00, 0x80, 0x00},             // MAXIMUM ATOMIC TRANSFER LENGTH: RAM's 16 MiB
			zeros(16),                                  // ATOMIC ALIGNMENT, GRANULARITY 0; no boundaries
		)},
		{"block limits, 4 KiB physical blocks, backstore unmap bound", func(cfg *Config) {
			withGeometry(4096, backstore.Capabilities{Unmap: true, UnmapZeroes: true, MaxUnmapBytes: 64 << 20})(cfg)
			cfg.ThinProvisioning = true
		}, 0xB0, cat(
			[]byte{0x00, 0xB0, 0x00, 0x3C},
			[]byte{0x00, 0xFF},
			[]byte{0x00, 0x08},             // 8 logical blocks per physical block
			[]byte{0x00, 0x00, 0x00, 0x00}, // MAXIMUM TRANSFER LENGTH
			[]byte{0x00, 0x00, 0x00, 0x00}, // OPTIMAL TRANSFER LENGTH
			zeros(4),
			[]byte{0x00, 0x02, 0x00, 0x00}, // MAXIMUM UNMAP LBA COUNT 64 MiB / 512
			[]byte{0x00, 0x00, 0x01, 0x00}, // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT 256
			[]byte{0x00, 0x00, 0x00, 0x08}, // OPTIMAL UNMAP GRANULARITY
			[]byte{0x80, 0x00, 0x00, 0x00}, // UGAVALID 1, UNMAP GRANULARITY ALIGNMENT 0
			[]byte{0, 0, 0, 0, 0x00, 0x02, 0x00, 0x00},
			zeros(20),
		)},
		{"block device characteristics, rotation not known", withGeometry(512, backstore.Capabilities{}), 0xB1,
			cat([]byte{0x00, 0xB1, 0x00, 0x3C, 0x00, 0x00}, zeros(58))},
		{"block device characteristics, non-rotational by configuration", func(cfg *Config) {
			withGeometry(512, backstore.Capabilities{})(cfg)
			cfg.NonRotational = true
		}, 0xB1, cat([]byte{0x00, 0xB1, 0x00, 0x3C, 0x00, 0x01}, zeros(58))},
		{"block device characteristics, non-rotational backstore", withGeometry(512, backstore.Capabilities{NonRotational: true}), 0xB1,
			cat([]byte{0x00, 0xB1, 0x00, 0x3C, 0x00, 0x01}, zeros(58))},
		{"block device characteristics, memory", nil, 0xB1,
			cat([]byte{0x00, 0xB1, 0x00, 0x3C, 0x00, 0x01}, zeros(58))},
		{"logical block provisioning, unmapped blocks read zero", thin, 0xB2,
			[]byte{0x00, 0xB2, 0x00, 0x04, 0x00, 0xE4, 0x02, 0x00}},
		{"logical block provisioning, unmapped blocks undefined", func(cfg *Config) {
			withGeometry(512, backstore.Capabilities{Unmap: true})(cfg)
			cfg.ThinProvisioning = true
		}, 0xB2, []byte{0x00, 0xB2, 0x00, 0x04, 0x00, 0xE0, 0x02, 0x00}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, m := readyMap(t, tc.mod)
			c := run(m, testNexus, 0, vpdCDB(tc.page, 0x1000), nil, 0x1000)
			requireData(t, c, tc.want, len(tc.want))

			// Linux's probe: 4 bytes first, PAGE LENGTH is that of the whole page.
			c = run(m, testNexus, 0, vpdCDB(tc.page, 4), nil, 255)
			requireData(t, c, tc.want[:4], 4)
		})
	}

	t.Run("block limits, thin, 4096-byte blocks, transfer limits", func(t *testing.T) {
		lu := newTestLU(t, 1000, 4096, func(cfg *Config) {
			cfg.ThinProvisioning = true
			cfg.MaxTransferBytes = 1 << 20
			cfg.OptimalTransferBytes = 256 << 10
		})
		m := newTestMap(t, lu)
		c := run(m, testNexus, 0, vpdCDB(0xB0, 64), nil, 64)
		requireData(t, c, cat(
			[]byte{0x00, 0xB0, 0x00, 0x3C},
			[]byte{0x00, 0x80},             // 1 MiB holds 2 × 128 blocks of 4096 bytes
			[]byte{0x00, 0x01},             // OPTIMAL TRANSFER LENGTH GRANULARITY
			[]byte{0x00, 0x00, 0x01, 0x00}, // MAXIMUM TRANSFER LENGTH 256 blocks
			[]byte{0x00, 0x00, 0x00, 0x40}, // OPTIMAL TRANSFER LENGTH 64 blocks
			zeros(4),
			[]byte{0x00, 0x04, 0x00, 0x00},             // MAXIMUM UNMAP LBA COUNT 1 GiB / 4096
			[]byte{0x00, 0x00, 0x01, 0x00},             // 256 descriptors
			[]byte{0x00, 0x00, 0x00, 0x01},             // OPTIMAL UNMAP GRANULARITY
			[]byte{0x80, 0x00, 0x00, 0x00},             // UGAVALID 1, UNMAP GRANULARITY ALIGNMENT 0
			[]byte{0, 0, 0, 0, 0x00, 0x00, 0x01, 0x00}, // MAXIMUM WRITE SAME LENGTH = MAXIMUM TRANSFER LENGTH
			[]byte{0x00, 0x00, 0x01, 0x00},             // MAXIMUM ATOMIC TRANSFER LENGTH = MAXIMUM TRANSFER LENGTH
			zeros(16),
		), 64)
	})

	// OPTIMAL UNMAP GRANULARITY: the backstore's unit of deallocation (a file's filesystem
	// block) in logical blocks when it is larger than the physical block.
	for _, tc := range []struct {
		pbs  uint32
		gran int64
		want uint32
	}{
		{512, 0, 1},
		{512, 4096, 8},
		{4096, 4096, 8},
		{4096, 1024, 8},
		{512, 64 << 10, 128},
		{512, 1 << 40, 1 << 20},
	} {
		t.Run(fmt.Sprintf("optimal unmap granularity, pbs %d, unmap granularity %d", tc.pbs, tc.gran), func(t *testing.T) {
			_, m := readyMap(t, func(cfg *Config) {
				withGeometry(tc.pbs, backstore.Capabilities{Unmap: true, UnmapZeroes: true, UnmapGranularity: tc.gran})(cfg)
				cfg.ThinProvisioning = true
			})
			c := run(m, testNexus, 0, vpdCDB(0xB0, 64), nil, 64)
			requireGood(t, c)
			require.Equal(t, tc.want, binary.BigEndian.Uint32(data(c)[28:32]))
		})
	}
}

func TestVPDTruncation(t *testing.T) {
	_, m := readyMap(t, nil)
	c := run(m, testNexus, 0, vpdCDB(0x83, 10), nil, 255)
	requireData(t, c, devIDTestLU[:10], 10)
	// A buffer smaller than the allocation length: the transport sees the overflow.
	c = run(m, testNexus, 0, vpdCDB(0x83, 0xFF), nil, 16)
	requireGood(t, c)
	require.Equal(t, devIDTestLU[:16], data(c))
	require.Equal(t, len(devIDTestLU), c.TransferLength)
	over, n := c.DataInResidual()
	require.True(t, over)
	require.Equal(t, len(devIDTestLU)-16, n)
	// Allocation length zero: nothing, GOOD.
	c = run(m, testNexus, 0, vpdCDB(0x80, 0), nil, 255)
	requireData(t, c, []byte{}, 0)
}

func TestVPDDeviceIdentificationVariants(t *testing.T) {
	lu := newTestLU(t, 1000, 512, nil)

	t.Run("no target port", func(t *testing.T) {
		c := &Command{Nexus: &Nexus{InitiatorPort: "x"}, CDB: vpdCDB(0x83, 255), DataIn: make([]byte, 255)}
		m := newTestMap(t, lu)
		m.Execute(c)
		requireGood(t, c)
		require.Equal(t, cat([]byte{0x00, 0x83, 0x00, 0x3C}, devIDTestLU[4:64]), data(c))
	})

	t.Run("long port name", func(t *testing.T) {
		port := &TargetPort{Name: strings.Repeat("n", 300), RelativeID: 0x1234, GroupID: 0x0102}
		n := &Nexus{InitiatorPort: "x", Port: port}
		m := newTestMap(t, lu)
		c := &Command{Nexus: n, CDB: vpdCDB(0x83, 1024), DataIn: make([]byte, 1024)}
		m.Execute(c)
		requireGood(t, c)
		d := data(c)
		// 60 bytes of LU designators, 16 of port ones, 4 + 256 of SCSI name.
		require.Equal(t, []byte{0x00, 0x83, 0x01, 0x50}, d[:4])
		require.Equal(t, []byte{0x01, 0x14, 0x00, 0x04, 0x00, 0x00, 0x12, 0x34}, d[64:72])
		require.Equal(t, []byte{0x01, 0x15, 0x00, 0x04, 0x00, 0x00, 0x01, 0x02}, d[72:80])
		require.Equal(t, []byte{0x03, 0x18, 0x00, 0x00}, d[80:84]) // length 256 wraps to 00h in one byte
		require.Equal(t, cat([]byte(strings.Repeat("n", 255)), []byte{0}), d[84:340])
	})

	t.Run("port name cut at a character boundary", func(t *testing.T) {
		// 254 ASCII bytes then a two-byte character: it does not fit before the terminator.
		port := &TargetPort{Name: strings.Repeat("a", 254) + "é", RelativeID: 1}
		m := newTestMap(t, lu)
		c := &Command{Nexus: &Nexus{Port: port}, CDB: vpdCDB(0x83, 1024), DataIn: make([]byte, 1024)}
		m.Execute(c)
		requireGood(t, c)
		d := data(c)
		require.Equal(t, []byte{0x00, 0x83, 0x01, 0x50}, d[:4])
		require.Equal(t, []byte{0x03, 0x18, 0x00, 0x00}, d[80:84])
		require.Equal(t, cat([]byte(strings.Repeat("a", 254)), []byte{0, 0}), d[84:340])
	})

	t.Run("empty port name", func(t *testing.T) {
		port := &TargetPort{RelativeID: 2}
		m := newTestMap(t, lu)
		c := &Command{Nexus: &Nexus{Port: port}, CDB: vpdCDB(0x83, 1024), DataIn: make([]byte, 1024)}
		m.Execute(c)
		requireGood(t, c)
		require.Equal(t, []byte{0x00, 0x83, 0x00, 0x4C}, data(c)[:4])
		require.Len(t, data(c), 80)
	})
}

func TestVPDT10VendorIDLong(t *testing.T) {
	serial := strings.Repeat("s", 252)
	lu := newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Serial = serial; cfg.Product = "0123456789abcdef" })
	m := newTestMap(t, lu)
	c := &Command{Nexus: &Nexus{}, CDB: vpdCDB(0x83, 1024), DataIn: make([]byte, 1024)}
	m.Execute(c)
	requireGood(t, c)
	d := data(c)
	// 8 + 16 + 1 + 252 bytes do not fit a one-byte DESIGNATOR LENGTH: cut at 255.
	require.Equal(t, []byte{0x02, 0x01, 0x00, 0xFF}, d[24:28])
	require.Equal(t, cat([]byte("SRPTGT  0123456789abcdef:"), []byte(serial[:230])), d[28:283])
	require.Len(t, d, 283)
	// No hexadecimal digit in "sss…": the NAA designator is the company identifier alone.
	require.Equal(t, cat([]byte{0x60, 0x01, 0x40, 0x50}, zeros(12)), d[8:24])
}

func TestNAADesignator(t *testing.T) {
	for _, tc := range []struct {
		serial string
		want   []byte
	}{
		{"a1b2c3d4-0001", []byte{0x60, 0x01, 0x40, 0x5A, 0x1B, 0x2C, 0x3D, 0x40, 0x00, 0x10, 0, 0, 0, 0, 0, 0}},
		{"ab", []byte{0x60, 0x01, 0x40, 0x5A, 0xB0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"xyz-7", []byte{0x60, 0x01, 0x40, 0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"none", []byte{0x60, 0x01, 0x40, 0x5E, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}, // only "e" is hex
		// 32 digits, upper and lower case: the first 25 are used.
		{"0123456789abcdefABCDEF0123456789", []byte{0x60, 0x01, 0x40, 0x50, 0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xFA, 0xBC, 0xDE, 0xF0, 0x12}},
		// LIO's default serial format, a UUID.
		{"6001405f-8c1e-4d47-9d4b-55e04f5b0a12", []byte{0x60, 0x01, 0x40, 0x56, 0x00, 0x14, 0x05, 0xF8, 0xC1, 0xE4, 0xD4, 0x79, 0xD4, 0xB5, 0x5E, 0x04}},
	} {
		t.Run(tc.serial, func(t *testing.T) {
			var got [16]byte
			naaRegisteredExtended(got[:], tc.serial)
			require.Equal(t, tc.want, got[:])
		})
	}
}

// TestVPDDeviceIdentificationTwoGateways: two logical units with the same serial, each behind
// its own target port (two daemons in front of one image), have byte-identical logical unit
// designators (NAA, T10 vendor ID), which initiators take as one logical unit, and differ only
// in the target port designators.
func TestVPDDeviceIdentificationTwoGateways(t *testing.T) {
	const serial = "5e2e000000006001"
	ports := []*TargetPort{
		{Name: "0x5e2e00000000b0015e2e00000000b001", RelativeID: 1, GroupID: 1},
		{Name: "0x5e2e00000000b0025e2e00000000b002", RelativeID: 2, GroupID: 2},
	}
	// designators splits page 0x83 by association (SPC-4 7.8.6.1: bits 5-4 of byte 1).
	designators := func(page []byte) (lu, port [][]byte) {
		for d := page[4:]; len(d) >= 4; d = d[4+int(d[3]):] {
			if d[1]&0x30 == 0 {
				lu = append(lu, d[:4+int(d[3])])
			} else {
				port = append(port, d[:4+int(d[3])])
			}
		}
		return lu, port
	}
	var lus, pts [2][][]byte
	for i, p := range ports {
		lu := newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Serial = serial })
		c := run(newTestMap(t, lu), &Nexus{InitiatorPort: "x", Port: p}, 0, vpdCDB(0x83, 255), nil, 255)
		requireGood(t, c)
		d := data(c)
		require.Len(t, d, 4+int(binary.BigEndian.Uint16(d[2:4])))
		lus[i], pts[i] = designators(d)
	}
	require.Len(t, lus[0], 2)
	require.Equal(t, lus[0], lus[1], "logical unit designators")
	// NAA 6, company 00 14 05, the digits of the serial.
	require.Equal(t, []byte{0x01, 0x03, 0x00, 0x10, 0x60, 0x01, 0x40, 0x55, 0xE2, 0xE0, 0x00, 0x00, 0x00, 0x06, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00}, lus[0][0])
	require.Equal(t, cat([]byte{0x02, 0x01, 0x00, 0x27}, []byte("SRPTGT  srptarget disk:"+serial)), lus[0][1])
	require.Len(t, pts[0], 3)
	require.Len(t, pts[1], 3)
	for i := range pts[0] {
		require.NotEqual(t, pts[0][i], pts[1][i], "target port designator %d", i)
	}
	require.Equal(t, [][]byte{
		{0x01, 0x14, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02},
		{0x01, 0x15, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02},
	}, pts[1][:2])
}
