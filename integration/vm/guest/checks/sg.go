package checks

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Readers of sg3_utils' output (sg_inq, sg_vpd, sg_readcap, sg_luns, sg_get_lba_status), the
// tools the checks see the logical units through, as an initiator's administrator would.

// Field is the value after "label:" on the first line that has it, without a trailing note in
// brackets ("0 blocks [not reported]" is "0 blocks") and trimmed; "" when no line has it.
func Field(out, label string) string {
	for _, line := range strings.Split(out, "\n") {
		i := strings.Index(line, label+":")
		if i < 0 {
			continue
		}
		v := strings.TrimSpace(line[i+len(label)+1:])
		if j := strings.Index(v, " ["); j >= 0 {
			v = strings.TrimSpace(v[:j])
		}
		return v
	}
	return ""
}

var vpdAbbrev = regexp.MustCompile(`(?m)\[([a-z0-9]+)\]$`)

// VPDPages are the pages sg_vpd -p 0x00 lists, by their sg_vpd abbreviations.
func VPDPages(out string) []string {
	var pages []string
	for _, m := range vpdAbbrev.FindAllStringSubmatch(out, -1) {
		pages = append(pages, m[1])
	}
	return pages
}

// Flags are the NAME=value words of sg_vpd's output for the names asked, in that order
// ("HEADSUP=1 ORDSUP=1"), each name once.
func Flags(out string, names ...string) string {
	var got []string
	for _, n := range names {
		m := regexp.MustCompile(`(^|[ \t\[])` + regexp.QuoteMeta(n) + `=([0-9]+)`).FindStringSubmatch(out)
		if m != nil {
			got = append(got, n+"="+m[2])
		}
	}
	return strings.Join(got, " ")
}

// Capacity is what sg_readcap -l reports.
type Capacity struct {
	Blocks      uint64
	BlockLength uint32
	LBPME       int
}

var (
	capBlocks = regexp.MustCompile(`Number of logical blocks=(\d+)`)
	capLength = regexp.MustCompile(`Logical block length=(\d+)`)
	capLBPME  = regexp.MustCompile(`lbpme=(\d)`)
)

// ParseCapacity reads sg_readcap -l's output.
func ParseCapacity(out string) (Capacity, error) {
	var c Capacity
	b, l, p := capBlocks.FindStringSubmatch(out), capLength.FindStringSubmatch(out), capLBPME.FindStringSubmatch(out)
	if b == nil || l == nil || p == nil {
		return c, fmt.Errorf("sg_readcap -l: no block count, block length or lbpme in %q", out)
	}
	c.Blocks, _ = strconv.ParseUint(b[1], 10, 64)
	n, _ := strconv.ParseUint(l[1], 10, 32)
	c.BlockLength = uint32(n)
	c.LBPME, _ = strconv.Atoi(p[1])
	return c, nil
}

func (c Capacity) String() string {
	return fmt.Sprintf("%d x %d, lbpme %d", c.Blocks, c.BlockLength, c.LBPME)
}

var lunLine = regexp.MustCompile(`(?m)^ +([0-9a-f]{16})\s*$`)

// LUNList is the LUNs sg_luns lists, as 16 hex digits each.
func LUNList(out string) []string {
	var luns []string
	for _, m := range lunLine.FindAllStringSubmatch(out, -1) {
		luns = append(luns, m[1])
	}
	return luns
}

// LBAStatus is one descriptor of GET LBA STATUS.
type LBAStatus struct {
	LBA, Blocks uint64
	Status      int // 0 mapped, 1 deallocated, 2 anchored
}

var lbaLine = regexp.MustCompile(`(?m)^\s*0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\d+)`)

// ParseLBAStatus reads sg_get_lba_status -b's descriptors ("0x<lba> 0x<blocks> <status> ...").
func ParseLBAStatus(out string) []LBAStatus {
	var ds []LBAStatus
	for _, m := range lbaLine.FindAllStringSubmatch(out, -1) {
		var d LBAStatus
		d.LBA, _ = strconv.ParseUint(m[1], 16, 64)
		d.Blocks, _ = strconv.ParseUint(m[2], 16, 64)
		d.Status, _ = strconv.Atoi(m[3])
		ds = append(ds, d)
	}
	return ds
}

// NAAOf is the NAA designator LIO (and srptarget) build from a serial: 6, the company id
// 001405, then the serial's hex digits (at most 25), zero padded.
func NAAOf(serial string) string {
	var h strings.Builder
	for _, r := range strings.ToLower(serial) {
		if (r >= '0' && r <= '9' || r >= 'a' && r <= 'f') && h.Len() < 25 {
			h.WriteRune(r)
		}
	}
	return "6001405" + h.String() + strings.Repeat("0", 25-h.Len())
}

// BlockLimits is what the Block Limits VPD page (0xb0) says of transfer and unmap sizes, in
// logical blocks.
type BlockLimits struct {
	MaxTransfer, MaxWriteSame, MaxUnmapLBAs, MaxUnmapDescriptors int64
}

// ParseBlockLimits reads sg_vpd -p 0xb0's output (sg_vpd prints the write same length in hex);
// a value that is not there is -1.
func ParseBlockLimits(out string) BlockLimits {
	n := func(label string) int64 {
		v, err := strconv.ParseInt(strings.TrimSuffix(Field(out, label), " blocks"), 0, 64)
		if err != nil {
			return -1
		}
		return v
	}
	return BlockLimits{
		MaxTransfer: n("Maximum transfer length"), MaxWriteSame: n("Maximum write same length"),
		MaxUnmapLBAs: n("Maximum unmap LBA count"), MaxUnmapDescriptors: n("Maximum unmap block descriptor count"),
	}
}

func (b BlockLimits) String() string {
	return fmt.Sprintf("max transfer %d blocks, write same %d blocks, unmap: %d blocks in %d descriptors",
		b.MaxTransfer, b.MaxWriteSame, b.MaxUnmapLBAs, b.MaxUnmapDescriptors)
}

// PortGroup is one target port group of REPORT TARGET PORT GROUPS.
type PortGroup struct {
	State string   // as sg_rtpg -d names it: "active/optimized", "standby", ...
	Ports []string // the relative target port ids, 0x01...
}

var (
	rtpgGroup = regexp.MustCompile(`target port group id\s*:\s*(0x[0-9a-fA-F]+)`)
	rtpgState = regexp.MustCompile(`asymmetric access state\s*:.*\((.*)\)`)
	rtpgPort  = regexp.MustCompile(`^\s+(0x[0-9a-fA-F]+)\s*$`)
)

// ParseRTPG reads sg_rtpg -d's output: the groups by id (0x1...).
func ParseRTPG(out string) map[string]PortGroup {
	groups := map[string]PortGroup{}
	id := ""
	for _, line := range strings.Split(out, "\n") {
		if m := rtpgGroup.FindStringSubmatch(line); m != nil {
			id = m[1]
			groups[id] = PortGroup{}
			continue
		}
		if id == "" {
			continue
		}
		g := groups[id]
		if m := rtpgState.FindStringSubmatch(line); m != nil {
			g.State = m[1]
		} else if m := rtpgPort.FindStringSubmatch(line); m != nil {
			g.Ports = append(g.Ports, m[1])
		}
		groups[id] = g
	}
	return groups
}

// Sense is the sense data of a command that ended in CHECK CONDITION, decoded from the bytes
// sg_raw -v prints ("Raw sense data (in hex), sb_len=N, embedded_len=M" and the bytes),
// fixed (70h, 71h) or descriptor (72h, 73h) format (SPC-4 4.5).
type Sense struct {
	Key, ASC, ASCQ byte
	// SKSV says the sense-key specific field is valid; for ILLEGAL REQUEST, CD says the field
	// pointer is into the CDB, Field is the byte it points at and Bit the bit (BPV set), else -1;
	// for NOT READY, Field is the PROGRESS INDICATION (of 65536).
	SKSV      bool
	CD        bool
	Field     int
	Bit       int
	Raw       []byte
	Formatted string // "05/24/00", the key, ASC and ASCQ in hex
}

var senseHead = regexp.MustCompile(`Raw sense data \(in hex\), sb_len=(\d+)(?:, embedded_len=(\d+))?`)

// ParseSense reads the raw sense data sg_raw -v (or another sg3_utils tool at -v) printed; ok
// is false when it printed none.
func ParseSense(out string) (s Sense, ok bool) {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		m := senseHead.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		want, _ := strconv.Atoi(m[1])
		if m[2] != "" {
			want, _ = strconv.Atoi(m[2])
		}
		var rows [][]byte
		total := 0
		for _, l := range lines[i+1:] {
			f := strings.Fields(l)
			if len(f) == 0 {
				break
			}
			var row []byte
			for _, x := range f {
				b, err := strconv.ParseUint(x, 16, 8)
				if err != nil || len(x) != 2 {
					row = nil
					break
				}
				row = append(row, byte(b))
			}
			if row == nil {
				break
			}
			rows = append(rows, row)
			total += len(row)
		}
		// sg3_utils' hex dumps may begin each row with its offset: one byte more per row.
		offsets := total == want+len(rows) && total != want
		for _, r := range rows {
			if offsets {
				r = r[1:]
			}
			s.Raw = append(s.Raw, r...)
		}
		return decodeSense(s.Raw)
	}
	return s, false
}

// decodeSense decodes sense data bytes (SPC-4 4.5.2, 4.5.3).
func decodeSense(b []byte) (Sense, bool) {
	s := Sense{Raw: b, Field: -1, Bit: -1}
	var sks []byte
	switch {
	case len(b) >= 14 && (b[0]&0x7f == 0x70 || b[0]&0x7f == 0x71):
		s.Key, s.ASC, s.ASCQ = b[2]&0x0f, b[12], b[13]
		if len(b) >= 18 {
			sks = b[15:18]
		}
	case len(b) >= 4 && (b[0]&0x7f == 0x72 || b[0]&0x7f == 0x73):
		s.Key, s.ASC, s.ASCQ = b[1]&0x0f, b[2], b[3]
		for d := b[min(8, len(b)):]; len(d) >= 2 && len(d) >= 2+int(d[1]); d = d[2+int(d[1]):] {
			if d[0] == 0x02 && d[1] >= 6 { // sense key specific descriptor
				sks = d[4:7]
			}
		}
	default:
		return s, false
	}
	if len(sks) == 3 && sks[0]&0x80 != 0 {
		s.SKSV = true
		s.CD = sks[0]&0x40 != 0
		s.Field = int(sks[1])<<8 | int(sks[2])
		if sks[0]&0x08 != 0 {
			s.Bit = int(sks[0] & 0x07)
		}
	}
	s.Formatted = fmt.Sprintf("%02X/%02X/%02X", s.Key, s.ASC, s.ASCQ)
	return s, true
}

// String is the key, ASC and ASCQ, and the field pointer when there is one.
func (s Sense) String() string {
	if !s.SKSV {
		return s.Formatted
	}
	if s.Key == 0x02 || s.Key == 0x00 { // NOT READY, NO SENSE: the field is PROGRESS INDICATION
		return fmt.Sprintf("%s, progress %.2f%%", s.Formatted, float64(s.Field)*100/65536)
	}
	where := "parameter data"
	if s.CD {
		where = "CDB"
	}
	if s.Bit >= 0 {
		return fmt.Sprintf("%s, %s byte %d bit %d", s.Formatted, where, s.Field, s.Bit)
	}
	return fmt.Sprintf("%s, %s byte %d", s.Formatted, where, s.Field)
}

var progress = regexp.MustCompile(`Progress indication: *([0-9.]+)%`)

// Progress is the percentage sg_requests --progress reports; ok false when it reports none (the
// operation has ended).
func Progress(out string) (pct float64, ok bool) {
	m := progress.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	pct, err := strconv.ParseFloat(m[1], 64)
	return pct, err == nil
}

// CUSummary is the counts of an iscsi-test-cu run (CUnit's "tests" row of the run summary).
type CUSummary struct {
	Ran, Passed, Failed, Skipped int
}

var cuTests = regexp.MustCompile(`(?m)^\s*tests\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`)

// ParseCU reads iscsi-test-cu's output; ok is false without a run summary.
func ParseCU(out string) (s CUSummary, ok bool) {
	m := cuTests.FindStringSubmatch(out)
	if m == nil {
		return s, false
	}
	s.Ran, _ = strconv.Atoi(m[2])
	s.Passed, _ = strconv.Atoi(m[3])
	s.Failed, _ = strconv.Atoi(m[4])
	s.Skipped = strings.Count(out, "[SKIPPED]")
	return s, true
}
