package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/srptarget/srptarget/internal/testutil"
)

// FuzzSanitizeOverwriteParams sends SANITIZE OVERWRITE with random parameter lists and lengths to
// a small RAM logical unit and checks the outcome against SBC-4 5.30.3 read independently:
//   - a refusal is ILLEGAL REQUEST and leaves the medium as it was;
//   - GOOD comes only for a list whose length is 5 to the block size plus 4, OVERWRITE COUNT 1
//     to 31, TEST 00b, byte 1 zero and an INITIALIZATION PATTERN LENGTH of the rest; every block
//     then holds the pattern repeated (with INVERT too: the last pass writes the pattern as
//     given), within a time bound.
func FuzzSanitizeOverwriteParams(f *testing.F) {
	const blocks = fuzzBlocks
	l := newFuzzLU(f, 512)
	mem, m := l.mem, l.m
	f.Add(uint16(5), []byte{0x01, 0, 0, 1, 0xAA})
	f.Add(uint16(8), []byte{0x83, 0, 0, 4, 1, 2, 3, 4})
	f.Add(uint16(516), append([]byte{0x1F, 0, 0x02, 0x00}, make([]byte, 512)...))
	f.Add(uint16(4), []byte{0x01, 0, 0, 0})
	f.Add(uint16(6), []byte{0x21, 0, 0, 2, 5, 6})
	orig := testutil.Pattern(blocks*512, 21)

	f.Fuzz(func(t *testing.T, paramLen uint16, list []byte) {
		if err := mem.WriteAt(orig, 0, false); err != nil {
			t.Fatal(err)
		}
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: sanitizeCDB(0x01, paramLen), DataOut: list}
		start := time.Now()
		m.Execute(c)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("SANITIZE OVERWRITE took %v", d)
		}
		after := make([]byte, blocks*512)
		if err := mem.ReadAt(after, 0); err != nil {
			t.Fatal(err)
		}
		valid := paramLen >= 5 && paramLen <= 516 && len(list) >= int(paramLen) &&
			list[0]&0x60 == 0 && list[0]&0x1F != 0 && list[1] == 0 &&
			int(binary.BigEndian.Uint16(list[2:])) == int(paramLen)-4
		if c.Status != StatusGood {
			s, ok := ParseSense(c.SenseData())
			if c.Status != StatusCheckCondition || !ok || s.Key != SenseIllegalRequest {
				t.Fatalf("status %v sense % x", c.Status, c.SenseData())
			}
			if valid {
				t.Fatalf("a valid list (% x) refused: % x", list[:paramLen], c.SenseData())
			}
			if !bytes.Equal(after, orig) {
				t.Fatal("a refused SANITIZE changed the medium")
			}
			return
		}
		if !valid {
			t.Fatalf("an invalid list (length %d, % x) accepted", paramLen, list)
		}
		pattern := list[4:paramLen]
		want := make([]byte, blocks*512)
		for b := 0; b < blocks; b++ {
			for i := 0; i < 512; i += len(pattern) {
				copy(want[b*512+i:(b+1)*512], pattern)
			}
		}
		if !bytes.Equal(after, want) {
			t.Fatal("the medium does not hold the pattern")
		}
	})
}
