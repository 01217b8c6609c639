package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// xcopyFuzzBlocks is the size of each logical unit FuzzExtendedCopyParams copies between: small,
// so that random LBAs and counts often fall outside it, and copies stay cheap.
const xcopyFuzzBlocks = 128

// xcopyFuzzTimeBound is the most one EXTENDED COPY of the fuzzer may take: its parameter list is
// at most 720 bytes and its copies at most 2 × 64 KiB here, so anything near this is a
// decoder or a copy loop gone wrong.
const xcopyFuzzTimeBound = time.Second

// FuzzExtendedCopyParams sends EXTENDED COPY (LID1) parameter lists, random and mutated from
// valid ones, to one of two logical units of a map and checks the outcome against an
// independent reading of SPC-4 6.4:
//   - every command ends within xcopyFuzzTimeBound, in GOOD or CHECK CONDITION with ILLEGAL
//     REQUEST or COPY ABORTED and well-formed sense data;
//   - a refused copy changes neither medium (every refusal here is found before data moves);
//   - a good copy leaves both media as copying each segment in turn, read whole before
//     written, from the CSCD its source index names to the one its destination index names.
func FuzzExtendedCopyParams(f *testing.F) {
	mems := [2]*backstore.Memory{}
	var lus [2]*LogicalUnit
	for i := range lus {
		mem, err := backstore.NewMemory(xcopyFuzzBlocks*512, 512)
		if err != nil {
			f.Fatal(err)
		}
		lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: "f022c0b1e50" + string(rune('0'+i)), WriteCache: true})
		if err != nil {
			f.Fatal(err)
		}
		mems[i], lus[i] = mem, lu
	}
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lus[0]}, {LUN: 1, LU: lus[1]}})
	if err != nil {
		f.Fatal(err)
	}
	for lun := range 2 {
		m.Execute(&Command{Nexus: testNexus, LUN: EncodeLUN(uint16(lun)), CDB: make([]byte, 6)}) // unit attention
	}
	ca, cb := identCSCD(lus[0]), identCSCD(lus[1])
	f.Add(uint8(0), xcopyList(1, listIDRetain, [][]byte{ca, cb}, [][]byte{b2bSegment(0, 1, 8, 0, 8)}))
	f.Add(uint8(1), xcopyList(0, listIDNone, [][]byte{cb, ca}, [][]byte{b2bSegment(0, 1, 100, 10, 20), b2bSegment(1, 1, 50, 0, 60), b2bSegment(0, 0, 30, 5, 20)}))
	f.Add(uint8(0), xcopyList(2, listIDHoldData, [][]byte{ca}, [][]byte{b2bSegment(0, 0, 64, 0, 32)}))
	f.Add(uint8(0), xcopyList(2, listIDHoldData, [][]byte{ca, cb}, [][]byte{b2bSegment(0, 2, 1, 0, 0)}))
	f.Add(uint8(1), xcopyList(0, listIDNone, [][]byte{ca}, [][]byte{b2bSegment(0, 0, 2, xcopyFuzzBlocks-1, 0)}))
	f.Add(uint8(0), []byte{0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 0})
	f.Add(uint8(0), []byte{})

	orig := [2][]byte{testutil.Pattern(xcopyFuzzBlocks*512, 11), testutil.Pattern(xcopyFuzzBlocks*512, 12)}
	f.Fuzz(func(t *testing.T, lun uint8, list []byte) {
		if len(list) > 4096 {
			list = list[:4096]
		}
		for i, mem := range mems {
			if err := mem.WriteAt(orig[i], 0, false); err != nil {
				t.Fatal(err)
			}
		}
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(uint16(lun & 1)), CDB: xcopyCDB(uint32(len(list))), DataOut: list}
		start := time.Now()
		m.Execute(c)
		if d := time.Since(start); d > xcopyFuzzTimeBound {
			t.Fatalf("EXTENDED COPY of a %d-byte list took %v", len(list), d)
		}
		var after [2][]byte
		for i, mem := range mems {
			after[i] = make([]byte, xcopyFuzzBlocks*512)
			if err := mem.ReadAt(after[i], 0); err != nil {
				t.Fatal(err)
			}
		}
		if c.Status == StatusCheckCondition {
			s, ok := ParseSense(c.SenseData())
			if !ok || (s.Key != SenseIllegalRequest && s.Key != SenseCopyAborted) {
				t.Fatalf("sense % x", c.SenseData())
			}
			if !bytes.Equal(after[0], orig[0]) || !bytes.Equal(after[1], orig[1]) {
				t.Fatalf("a refused EXTENDED COPY (% x) changed a medium", c.SenseData())
			}
			return
		}
		if c.Status != StatusGood {
			t.Fatalf("status %v", c.Status)
		}
		want := [2][]byte{bytes.Clone(orig[0]), bytes.Clone(orig[1])}
		if len(list) >= 16 {
			cscdLen := int(binary.BigEndian.Uint16(list[2:]))
			segLen := int(binary.BigEndian.Uint32(list[8:]))
			which := func(id uint16) int {
				d := list[16+32*int(id):]
				for i, lu := range lus {
					if bytes.Equal(d[4:4+4+int(d[7])], lu.naaDescriptor[:]) {
						return i
					}
				}
				t.Fatalf("a good copy named CSCD %d, which is no logical unit", id)
				return -1
			}
			for off := 16 + cscdLen; off < 16+cscdLen+segLen; off += 28 {
				d := list[off:]
				n := int(binary.BigEndian.Uint16(d[10:]))
				src, dst := which(binary.BigEndian.Uint16(d[4:])), which(binary.BigEndian.Uint16(d[6:]))
				sl, dl := binary.BigEndian.Uint64(d[12:]), binary.BigEndian.Uint64(d[20:])
				if n == 0 {
					continue
				}
				if sl+uint64(n) > xcopyFuzzBlocks || dl+uint64(n) > xcopyFuzzBlocks {
					t.Fatalf("segment at %d (LBAs %d -> %d, %d blocks) outside the medium accepted", off, sl, dl, n)
				}
				copy(want[dst][dl*512:], bytes.Clone(want[src][sl*512:(sl+uint64(n))*512]))
			}
		}
		if !bytes.Equal(after[0], want[0]) || !bytes.Equal(after[1], want[1]) {
			t.Fatal("a good EXTENDED COPY left other data than its segments say")
		}
	})
}
