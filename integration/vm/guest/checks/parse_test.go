package checks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The readers of the tools' output, against output the tools printed in the VM (testdata/,
// taken from a run's console log).

func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

func TestField(t *testing.T) {
	inq := testdata(t, "sg_inq.txt")
	for _, tc := range []struct{ out, label, want string }{
		{inq, "Vendor identification", "SRPTE2E"},
		{inq, "Product identification", "memory lun"},
		{inq, "Product revision level", "M001"},
		{inq, "Unit serial number", "5e2e0000a0"},
		{inq, "no such label", ""},
		{testdata(t, "vpd83.txt"), "vendor id", "SRPTE2E"},
		{testdata(t, "vpd83.txt"), "Relative target port", "0x1"},
		{testdata(t, "vpdb2.txt"), "(LBPU)", "1"},
		{testdata(t, "vpdb2.txt"), "Provisioning type", "2 (thin provisioned)"},
		// a note in brackets is not the value
		{testdata(t, "vpdb0-lun0.txt"), "Maximum unmap LBA count", "0"},
	} {
		require.Equal(t, tc.want, Field(tc.out, tc.label), tc.label)
	}
}

func TestVPDPagesAndFlags(t *testing.T) {
	require.Equal(t, []string{"sv", "sn", "di", "ei", "bl", "bdc"}, VPDPages(testdata(t, "vpd00.txt")))
	require.Equal(t, "HEADSUP=1 ORDSUP=1 SIMPSUP=1 NV_SUP=0 V_SUP=1",
		Flags(testdata(t, "vpd86.txt"), "HEADSUP", "ORDSUP", "SIMPSUP", "NV_SUP", "V_SUP"))
	// CRD_SUP is printed in brackets; SUP alone is no flag of the page
	require.Equal(t, "CRD_SUP=0", Flags(testdata(t, "vpd86.txt"), "CRD_SUP", "SUP"))
}

func TestParseBlockLimits(t *testing.T) {
	require.Equal(t, BlockLimits{MaxTransfer: 16384, MaxWriteSame: 0x4000}, ParseBlockLimits(testdata(t, "vpdb0-lun0.txt")))
	require.Equal(t, BlockLimits{MaxTransfer: 2048, MaxWriteSame: 0x800, MaxUnmapLBAs: 262144, MaxUnmapDescriptors: 256},
		ParseBlockLimits(testdata(t, "vpdb0-lun1.txt")))
	require.Equal(t, BlockLimits{-1, -1, -1, -1}, ParseBlockLimits(""))
}

func TestParseCapacity(t *testing.T) {
	c, err := ParseCapacity(testdata(t, "readcap.txt"))
	require.NoError(t, err)
	require.Equal(t, "524288 x 512, lbpme 0", c.String())
	_, err = ParseCapacity("sg_readcap failed: Illegal request")
	require.Error(t, err)
}

func TestLUNListAndLBAStatus(t *testing.T) {
	require.Equal(t, []string{"0000000000000000", "0001000000000000"}, LUNList(testdata(t, "luns.txt")))
	require.Equal(t, []LBAStatus{{0x19000, 0x400, 0}, {0x19400, 0x800, 1}, {0x19c00, 0x400, 0}},
		ParseLBAStatus(testdata(t, "lbastatus.txt")))
}

func TestNAAOf(t *testing.T) {
	require.Equal(t, "60014055e2e0000a0000000000000000", NAAOf("5e2e0000a0"))
	// at most 25 hex digits of the serial, non-hex characters left out
	require.Equal(t, "6001405"+"0123456789abcdef012345678", NAAOf("0123-4567-89AB-CDEF-0123-4567-89xyz"))
}

func TestParseFio(t *testing.T) {
	// fio writes its warnings into the report file before the JSON object
	r, err := ParseFio([]byte(testdata(t, "fio.json")))
	require.NoError(t, err)
	require.Equal(t, int64(512), r.Writes)
	require.Equal(t, int64(512), r.Reads)
	require.Zero(t, r.Errno)
	require.True(t, r.Verified())
	r.Reads--
	require.False(t, r.Verified(), "a write not read back")
	r.Reads, r.Code = r.Writes, 1
	require.False(t, r.Verified(), "fio's exit status")
	_, err = ParseFio([]byte("fio: pid=12, err=5/file:io_u.c:1889, func=io_u error"))
	require.Error(t, err)

	// the error lines fio writes, and a job's errno without one
	r = FioResult{}
	r.errLines("verify: bad magic header 0, wanted acca at file /dev/sda offset 4096, length 4096\nfio: io_u error on file /dev/sdb: Input/output error: write offset=0, buflen=4096")
	require.Equal(t, 1, r.VerifyErrors)
	require.Equal(t, 1, r.IOErrors)
	require.Contains(t, r.Problem, "bad magic header")
	r = FioResult{Errno: 84}
	r.errLines("")
	require.Equal(t, 1, r.VerifyErrors)
	require.False(t, r.Clean())
	require.Equal(t, "0 writes, 0 verify reads, 1 verify errors, 0 I/O errors, fio exit 0", r.Summary())
}

func TestCMListening(t *testing.T) {
	out := testdata(t, "cm_id.txt")
	require.True(t, cmListeningIn(out, 5555))
	require.False(t, cmListeningIn(out, 555))
	require.False(t, cmListeningIn(strings.Replace(out, "LISTEN", "CONNECT", 1), 5555))
}

func TestGIDOf(t *testing.T) {
	g, err := GIDOf("169.254.50.1")
	require.NoError(t, err)
	require.Equal(t, "0000:0000:0000:0000:0000:ffff:a9fe:3201", g)
	g, err = GIDOf("fd53:5250::1")
	require.NoError(t, err)
	require.Equal(t, "fd53:5250:0000:0000:0000:0000:0000:0001", g)
}

func TestParseLogLine(t *testing.T) {
	var lines []LogLine
	for _, s := range strings.Split(strings.TrimSpace(testdata(t, "daemon.log")), "\n") {
		if l, ok := ParseLogLine(s); ok {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 3, "the panic line is no log line")
	require.True(t, lines[0].Is(MsgListenerWaits))
	require.Equal(t, "WARN", lines[0].Level)
	require.Equal(t, "ib port 5555", lines[0].Field("address"))
	require.True(t, lines[1].Is(MsgLoginRejected))
	require.Equal(t, "0x00000000deadbeef000000fffe000001", lines[1].Field("initiator"))
	require.Contains(t, lines[1].Field("detail"), `{initiators: ["0x00000000deadbeef000000fffe000001"], luns: [0, 1]}`)
	require.False(t, lines[2].Is(MsgLoginRejected))
	require.Equal(t, "1", lines[2].Field("channel"), "a number field as text")
}

func TestOneLine(t *testing.T) {
	// testify's failure message: the trace and the test's name left out
	msg := "\n\tError Trace:\t/src/e2e_test.go:10\n\t            \t/src/lab.go:20\n\tError:      \tNot equal: \n\t            \texpected: 1\n\t            \tactual  : 2\n\tTest:       \tTestE2E/x\n\tMessages:   \tthe count"
	require.Equal(t, "Not equal: expected: 1 actual : 2 the count", oneLine(msg))
	require.Equal(t, "a/b c", oneLine("a|b\nc"))
	require.Len(t, oneLine(strings.Repeat("x", 1000)), 400)
}

func TestParseSense(t *testing.T) {
	const head = "    SCSI Status: Check Condition\n\n Sense Information:\nFixed format, current; Sense key: Illegal Request\n" +
		"Additional sense: Invalid field in cdb\n  Sense Key Specific: Error in Command: byte 1 bit 4\n" +
		" Raw sense data (in hex), sb_len=18, embedded_len=18\n"
	for _, tc := range []struct {
		name, out string
		want      string
		field     int
	}{
		{"fixed, bytes only", head + "        70 00 05 00 00 00 00 0a  00 00 00 00 24 00 00 cc\n        00 01\n", "05/24/00, CDB byte 1 bit 4", 1},
		{"fixed, offsets", head + " 00     70 00 05 00 00 00 00 0a  00 00 00 00 24 00 00 cc\n 10     00 01\n", "05/24/00, CDB byte 1 bit 4", 1},
		{"fixed, no bit pointer", strings.Replace(head, "sb_len=18, embedded_len=18", "sb_len=18", 1) +
			"        70 00 05 00 00 00 00 0a  00 00 00 00 24 00 00 c0\n        00 0a\n", "05/24/00, CDB byte 10", 10},
		{"sanitize in progress", " Raw sense data (in hex), sb_len=18, embedded_len=18\n" +
			"        70 00 02 00 00 00 00 0a  00 00 00 00 04 1b 00 80\n        05 00\n", "02/04/1B, progress 1.95%", 1280},
		{"descriptor", " Raw sense data (in hex), sb_len=16, embedded_len=16\n" +
			"        72 05 20 00 00 00 00 08  02 06 00 00 cf 00 02 00\n", "05/20/00, CDB byte 2 bit 7", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := ParseSense(tc.out)
			require.True(t, ok)
			require.Equal(t, tc.want, s.String())
			require.Equal(t, tc.field, s.Field)
		})
	}
	_, ok := ParseSense("    SCSI Status: Good\n")
	require.False(t, ok, "no sense data")
	_, ok = ParseSense(" Raw sense data (in hex), sb_len=2\n        ab cd\n")
	require.False(t, ok, "too short to decode")
}

func TestProgress(t *testing.T) {
	p, ok := Progress("Decode parameter data as sense data:\n Progress indication: 2.08% done\n")
	require.True(t, ok)
	require.InDelta(t, 2.08, p, 1e-9)
	_, ok = Progress("No progress indication found")
	require.False(t, ok)
}

func TestParseCU(t *testing.T) {
	out := "Suite: WriteSame16\n  Test: Simple ...passed\n  Test: UnmapUnaligned ...    [SKIPPED] LBPPB < 2. Skipping test\n" +
		"  Test: InvalidDataOutSize ...    [SKIPPED] LBPPB < 2. Skipping test\n\nRun Summary:    Type  Total    Ran Passed Failed Inactive\n" +
		"              suites      1      1    n/a      0        0\n               tests     10     10     10      0        0\n" +
		"             asserts    300    300    300      0      n/a\n"
	s, ok := ParseCU(out)
	require.True(t, ok)
	require.Equal(t, CUSummary{Ran: 10, Passed: 10, Failed: 0, Skipped: 2}, s)
	_, ok = ParseCU("Segmentation fault\n")
	require.False(t, ok)
}
