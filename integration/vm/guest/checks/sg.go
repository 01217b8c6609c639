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
