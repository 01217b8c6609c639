package scsi

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func rsocCDB(rctd bool, option, opcode byte, sa uint16, alloc uint32) []byte {
	cdb := []byte{0xA3, 0x0C, option, opcode, byte(sa >> 8), byte(sa), byte(alloc >> 24), byte(alloc >> 16), byte(alloc >> 8), byte(alloc), 0, 0}
	if rctd {
		cdb[2] |= 0x80
	}
	return cdb
}

// timeoutsDescriptor is a command timeouts descriptor with no timeouts specified.
var timeoutsDescriptor = []byte{0x00, 0x0A, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}

func TestReportSupportedOpcodesOne(t *testing.T) {
	_, m := readyMap(t, nil)
	inquiryOne := []byte{0x00, 0x03, 0x00, 0x06, 0x12, 0x01, 0xFF, 0xFF, 0xFF, 0x07}
	rc16One := cat([]byte{0x00, 0x03, 0x00, 0x10},
		[]byte{0x9E, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x07})
	notSupported := []byte{0x00, 0x01, 0x00, 0x00}
	for _, tc := range []struct {
		name string
		cdb  []byte
		want []byte
	}{
		{"option 1: INQUIRY", rsocCDB(false, 1, 0x12, 0, 512), inquiryOne},
		{"option 1: REQUESTED SERVICE ACTION ignored", rsocCDB(false, 1, 0x12, 0x1234, 512), inquiryOne},
		{"option 1 with RCTD", rsocCDB(true, 1, 0x12, 0, 512),
			cat([]byte{0x00, 0x83, 0x00, 0x06, 0x12, 0x01, 0xFF, 0xFF, 0xFF, 0x07}, timeoutsDescriptor)},
		{"option 1: MODE SENSE(10)", rsocCDB(false, 1, 0x5A, 0, 512),
			[]byte{0x00, 0x03, 0x00, 0x0A, 0x5A, 0x18, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}},
		{"option 1: REPORT LUNS", rsocCDB(false, 1, 0xA0, 0, 512),
			[]byte{0x00, 0x03, 0x00, 0x0C, 0xA0, 0x00, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}},
		{"option 1: not supported (vendor specific C0h)", rsocCDB(false, 1, 0xC0, 0, 512), notSupported},
		{"option 1: not supported, RCTD", rsocCDB(true, 1, 0xC0, 0, 512), notSupported},
		{"option 1: UNMAP without thin provisioning", rsocCDB(false, 1, 0x42, 0, 512), notSupported},
		{"option 2: READ CAPACITY(16)", rsocCDB(false, 2, 0x9E, 0x10, 512), rc16One},
		{"option 2: unsupported service action", rsocCDB(false, 2, 0x9E, 0x1F, 512), notSupported},
		{"option 2: service action beyond five bits", rsocCDB(false, 2, 0x9E, 0x0110, 512), notSupported},
		{"option 2: operation code not supported at all", rsocCDB(false, 2, 0xC0, 0x00, 512), notSupported},
		{"option 2: PERSISTENT RESERVE IN READ FULL STATUS", rsocCDB(false, 2, 0x5E, 0x03, 512),
			[]byte{0x00, 0x03, 0x00, 0x0A, 0x5E, 0x1F, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}},
		{"option 2: PERSISTENT RESERVE OUT REGISTER AND MOVE", rsocCDB(false, 2, 0x5F, 0x07, 512),
			[]byte{0x00, 0x03, 0x00, 0x0A, 0x5F, 0x1F, 0xFF, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x07}},
		{"option 2: PERSISTENT RESERVE OUT service action 08h", rsocCDB(false, 2, 0x5F, 0x08, 512), notSupported},
		{"option 1: RESERVE(10)", rsocCDB(false, 1, 0x56, 0, 512),
			[]byte{0x00, 0x03, 0x00, 0x0A, 0x56, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07}},
		{"option 3: READ CAPACITY(16) (linux)", rsocCDB(false, 3, 0x9E, 0x10, 512), rc16One},
		{"option 3: REPORT SUPPORTED OPERATION CODES", rsocCDB(false, 3, 0xA3, 0x0C, 512),
			[]byte{0x00, 0x03, 0x00, 0x0C, 0xA3, 0x1F, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}},
		{"option 3: REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS with RCTD", rsocCDB(true, 3, 0xA3, 0x0D, 512),
			cat([]byte{0x00, 0x83, 0x00, 0x0C, 0xA3, 0x1F, 0x80, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}, timeoutsDescriptor)},
		{"option 3: service action ignored without service actions", rsocCDB(false, 3, 0x12, 0x0005, 512), inquiryOne},
		{"option 3: not supported", rsocCDB(false, 3, 0xA3, 0x0A, 512), notSupported},
		{"truncated", rsocCDB(false, 1, 0x12, 0, 6), inquiryOne[:6]},
		{"allocation zero", rsocCDB(false, 1, 0x12, 0, 0), []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, tc.cdb, nil, 512)
			requireData(t, c, tc.want, len(tc.want))
		})
	}

	t.Run("UNMAP with thin provisioning", func(t *testing.T) {
		_, m := readyMap(t, func(cfg *Config) { cfg.ThinProvisioning = true })
		c := run(m, testNexus, 0, rsocCDB(false, 1, 0x42, 0, 512), nil, 512)
		requireGood(t, c)
		require.Equal(t, []byte{0x00, 0x03, 0x00, 0x0A, 0x42}, data(c)[:5])
	})
}

func TestReportSupportedOpcodesErrors(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []cdbCase{
		{"option 1 for an operation code with service actions", rsocCDB(false, 1, 0x9E, 0x10, 512), 3, -1},
		{"option 1 for MAINTENANCE IN", rsocCDB(false, 1, 0xA3, 0, 512), 3, -1},
		{"option 2 for an operation code without service actions", rsocCDB(false, 2, 0x12, 0, 512), 3, -1},
		{"option 4", rsocCDB(false, 4, 0x12, 0, 512), 2, 2},
		{"option 7", rsocCDB(false, 7, 0x12, 0, 512), 2, 2},
		{"reserved bits of byte 2", rsocCDB(false, 0x08, 0x12, 0, 512), 2, 3},
		{"reserved bits of byte 1", []byte{0xA3, 0x2C, 1, 0x12, 0, 0, 0, 0, 2, 0, 0, 0}, 1, 5},
		{"reserved byte 10", []byte{0xA3, 0x0C, 1, 0x12, 0, 0, 0, 0, 2, 0, 0x01, 0}, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCDBCase(t, run(m, testNexus, 0, tc.cdb, nil, 512), tc)
		})
	}
}

// parseAllCommands splits all_commands parameter data into its command descriptors.
func parseAllCommands(t *testing.T, d []byte, rctd bool) [][]byte {
	t.Helper()
	require.GreaterOrEqual(t, len(d), 4)
	n := int(binary.BigEndian.Uint32(d[:4]))
	require.Equal(t, len(d)-4, n, "COMMAND DATA LENGTH")
	size := 8
	if rctd {
		size = 20
	}
	require.Zero(t, n%size)
	var out [][]byte
	for off := 4; off < len(d); off += size {
		out = append(out, d[off:off+size])
	}
	return out
}

func TestReportSupportedOpcodesAll(t *testing.T) {
	for _, thin := range []bool{false, true} {
		t.Run(fmt.Sprintf("thin=%v", thin), func(t *testing.T) {
			_, m := readyMap(t, func(cfg *Config) { cfg.ThinProvisioning = thin })
			c := run(m, testNexus, 0, rsocCDB(false, 0, 0xFF, 0xFFFF, 0x10000), nil, 0x10000)
			requireGood(t, c)
			descs := parseAllCommands(t, data(c), false)

			// Every command of the table, UNMAP only with thin provisioning, REPORT TARGET
			// PORT GROUPS only with ALUA (not on testNexus's port), SET TARGET PORT GROUPS
			// only with shared states, each once, in operation code then service action order.
			want := len(spcCommands) + len(sbcCommands) + len(prCommands) + len(copyCommands) + len(atomicCommands) +
				len(sanitizeCommands) + len(orWriteCommands) - 2
			if !thin {
				want -= 2 // UNMAP, SANITIZE BLOCK ERASE
			}
			require.Len(t, descs, want)
			prev := -1
			for _, d := range descs {
				key := int(d[0])<<16 | int(binary.BigEndian.Uint16(d[2:4]))
				require.Greater(t, key, prev, "order at % x", d)
				prev = key
				require.Zero(t, d[1])
				require.Zero(t, d[4])
				require.Zero(t, d[5]&^0x01, "CTDP without RCTD")
				if !thin {
					require.NotEqual(t, byte(0x42), d[0])
				}
			}

			// The SPC commands, written out.
			for _, w := range [][]byte{
				{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // TEST UNIT READY
				{0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // REQUEST SENSE
				{0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // INQUIRY
				{0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // MODE SELECT(6)
				{0x1A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // MODE SENSE(6)
				{0x1E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06}, // PREVENT ALLOW MEDIUM REMOVAL
				{0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0A}, // READ CAPACITY(10)
				{0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0A}, // MODE SELECT(10)
				{0x5A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0A}, // MODE SENSE(10)
				{0x9E, 0x00, 0x00, 0x10, 0x00, 0x01, 0x00, 0x10}, // READ CAPACITY(16), SERVACTV
				{0xA0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0C}, // REPORT LUNS
				{0xA3, 0x00, 0x00, 0x0C, 0x00, 0x01, 0x00, 0x0C}, // REPORT SUPPORTED OPERATION CODES
				{0xA3, 0x00, 0x00, 0x0D, 0x00, 0x01, 0x00, 0x0C}, // REPORT SUPPORTED TMFs
			} {
				require.Contains(t, descs, w)
			}

			// Each descriptor agrees with what option 3 says of the command.
			for _, d := range descs {
				one := run(m, testNexus, 0, rsocCDB(false, 3, d[0], binary.BigEndian.Uint16(d[2:4]), 512), nil, 512)
				requireGood(t, one)
				od := data(one)
				require.Equal(t, byte(0x03), od[1], "SUPPORT of % x", d)
				require.Equal(t, d[6:8], od[2:4], "CDB SIZE of % x", d)
				require.Len(t, od, 4+int(binary.BigEndian.Uint16(d[6:8])))
				require.Equal(t, d[0], od[4], "usage data starts with the operation code")
			}
		})
	}
}

func TestReportSupportedOpcodesAllRCTD(t *testing.T) {
	_, m := readyMap(t, nil)
	c := run(m, testNexus, 0, rsocCDB(true, 0, 0, 0, 0x10000), nil, 0x10000)
	requireGood(t, c)
	descs := parseAllCommands(t, data(c), true)
	for _, d := range descs {
		require.Equal(t, byte(0x02), d[5]&0x02, "CTDP of % x", d)
		require.Equal(t, timeoutsDescriptor, d[8:20])
	}
	require.Contains(t, descs, cat([]byte{0x12, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x06}, timeoutsDescriptor))
	require.Contains(t, descs, cat([]byte{0x9E, 0x00, 0x00, 0x10, 0x00, 0x03, 0x00, 0x10}, timeoutsDescriptor))

	// Truncated: the header still holds the full length.
	full := data(c)
	c = run(m, testNexus, 0, rsocCDB(true, 0, 0, 0, 30), nil, 0x10000)
	requireData(t, c, full[:30], 30)
	c = run(m, testNexus, 0, rsocCDB(true, 0, 0, 0, 0x10000), nil, 10)
	requireGood(t, c)
	require.Equal(t, full[:10], data(c))
	require.Equal(t, len(full), c.TransferLength)
}

func TestReportSupportedTMFs(t *testing.T) {
	_, m := readyMap(t, nil)
	rstmf := func(repd bool, alloc uint32) []byte {
		cdb := []byte{0xA3, 0x0D, 0, 0, 0, 0, byte(alloc >> 24), byte(alloc >> 16), byte(alloc >> 8), byte(alloc), 0, 0}
		if repd {
			cdb[2] = 0x80
		}
		return cdb
	}
	// ATS ATSS CTSS LURS QTS, not CACAS; ITNRS.
	basic := []byte{0xDC, 0x01, 0x00, 0x00}
	extended := cat([]byte{0xDC, 0x01, 0x00, 0x0C}, []byte{0x00, 0x00, 0x00, 0x00}, zeros(8))
	for _, tc := range []struct {
		name string
		cdb  []byte
		want []byte
	}{
		{"basic", rstmf(false, 512), basic},
		{"extended", rstmf(true, 512), extended},
		{"truncated", rstmf(false, 2), basic[:2]},
		{"extended truncated", rstmf(true, 4), extended[:4]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, tc.cdb, nil, 512)
			requireData(t, c, tc.want, len(tc.want))
		})
	}
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0xA3, 0x0D, 0x01, 0, 0, 0, 0, 0, 0, 16, 0, 0}, nil, 512), 2, 0)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0xA3, 0x0D, 0, 0x01, 0, 0, 0, 0, 0, 16, 0, 0}, nil, 512), 3, 0)
}

// TestReportSupportedTMFsNarrowedByTransport: a transport that carries fewer task management
// functions than the logical unit implements reports only the ones both support.
func TestReportSupportedTMFsNarrowedByTransport(t *testing.T) {
	lu := newTestLU(t, 2048, 512, func(c *Config) {
		c.TaskManagement = TMFAbortTask | TMFAbortTaskSet | TMFClearTaskSet | TMFLogicalUnitRst | TMFClearACA
	})
	m := newTestMap(t, lu)
	clearPowerOnUA(t, m, testNexus)
	cdb := []byte{0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0}
	c := run(m, testNexus, 0, cdb, nil, 4)
	require.Equal(t, StatusGood, c.Status)
	// ATS ATSS CTSS LURS; CLEAR ACA is not implemented by the logical unit, so it stays off.
	require.Equal(t, []byte{0xD8, 0x00, 0x00, 0x00}, c.DataIn[:c.DataInLength])
}
