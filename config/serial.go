package config

import (
	"fmt"
	"strings"

	"github.com/srptarget/srptarget/scsi"
)

// SerialClash is two LUNs whose unit serial numbers cannot both be served: luns[I] and
// luns[J] (J < I) with the serials SerialI and SerialJ.
type SerialClash struct {
	I, J             int
	SerialI, SerialJ string
}

// Message says what is wrong with luns[I]'s serial, other naming luns[J] ("luns[0] (line 5)").
func (c SerialClash) Message(other string) string {
	if c.SerialI == c.SerialJ {
		return fmt.Sprintf("%q is also the serial of %s: two LUNs with one serial share one persistent reservation state (and its file under state_dir), and initiators see one WWID, so multipath would take them for two paths to one disk; give each LUN its own serial",
			c.SerialI, other)
	}
	return fmt.Sprintf("%q and the serial of %s, %q, give the same WWID (the NAA designator of VPD page 0x83 keeps only the first 25 hexadecimal digits of a serial, in any case: %q), so multipath would take the two LUNs for two paths to one disk; give each LUN a serial with other hexadecimal digits",
		c.SerialI, other, c.SerialJ, naaDigits(c.SerialI))
}

// SerialClashes finds the LUNs whose serials (serials[i] for luns[i], "" for none) are equal
// or give the same NAA designator, each LUN against the first one it clashes with.
func SerialClashes(serials []string) []SerialClash {
	var out []SerialClash
	exact := make(map[string]int, len(serials))
	naa := make(map[[16]byte]int, len(serials))
	for i, s := range serials {
		if s == "" {
			continue
		}
		id := scsi.NAAIdentifier(s)
		j, dup := exact[s]
		if !dup {
			j, dup = naa[id]
		}
		if dup {
			out = append(out, SerialClash{I: i, J: j, SerialI: s, SerialJ: serials[j]})
			continue
		}
		exact[s], naa[id] = i, i
	}
	return out
}

// naaDigits is what the NAA designator keeps of a serial (scsi.NAAIdentifier).
func naaDigits(serial string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(serial) {
		if b.Len() == 25 {
			break
		}
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'f' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// checkSerials refuses LUNs whose serials clash (SerialClashes). The serials left to their
// default (the target identity and the LUN number) are checked when the daemon resolves them.
func (v *validator) checkSerials(c *Config) {
	serials := make([]string, len(c.LUNs))
	for i, l := range c.LUNs {
		serials[i] = l.Serial
	}
	for _, cl := range SerialClashes(serials) {
		other := fmt.Sprintf("luns[%d] (line %d)", cl.J, lineOf(v.root, At("luns", cl.J, "serial")))
		v.errorf(At("luns", cl.I, "serial"), "%s", cl.Message(other))
	}
}
