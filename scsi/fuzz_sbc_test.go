package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// fuzzOpcodes are the block commands FuzzSBCCDB sends.
var fuzzOpcodes = []byte{
	0x08, 0x0A, 0x28, 0x2A, 0xA8, 0xAA, 0x88, 0x8A, // READ, WRITE
	0x2E, 0x8E, 0x2F, 0x8F, // WRITE AND VERIFY, VERIFY
	0x35, 0x91, 0x41, 0x93, 0x42, 0x89, 0x1B, // SYNC CACHE, WRITE SAME, UNMAP, COMPARE AND WRITE, START STOP
}

// fuzzBlocks is the capacity of the fuzzers' logical units: small, so that the medium can be
// compared before and after every command cheaply.
const fuzzBlocks = 32

// fuzzLU is a small logical unit for the fuzzers: fuzzBlocks blocks, thin provisioned, a maximum
// transfer of 32 KiB, over a memory backstore the fuzzer can inspect.
type fuzzLU struct {
	m   *LUNMap
	mem *backstore.Memory
	bs  int
}

func newFuzzLU(f *testing.F, bs uint32) *fuzzLU {
	mem, err := backstore.NewMemory(fuzzBlocks*int64(bs), bs)
	if err != nil {
		f.Fatal(err)
	}
	lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: "fuzz", WriteCache: true,
		ThinProvisioning: true, MaxTransferBytes: 32 << 10})
	if err != nil {
		f.Fatal(err)
	}
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}})
	if err != nil {
		f.Fatal(err)
	}
	m.Execute(&Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: make([]byte, 6)}) // unit attention
	return &fuzzLU{m: m, mem: mem, bs: int(bs)}
}

func (l *fuzzLU) medium(t *testing.T) []byte {
	p := make([]byte, fuzzBlocks*l.bs)
	if err := l.mem.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzSBCCDB sends block commands with random fields and data-out buffers and checks what must
// hold whatever the input: the command ends GOOD or CHECK CONDITION with sense data that parses
// and an ILLEGAL REQUEST or MISCOMPARE key (the memory backstore does not fail); a command that
// fails leaves the medium as it was; data-in stays within the buffer and the transfer, in whole
// blocks; a good READ returns the medium's bytes and a good WRITE puts the data-out there.
//
// When sel has its top bit set, the high bytes of the LBA and length fields are cleared so that
// many commands fall inside the small medium and get past the range checks.
func FuzzSBCCDB(f *testing.F) {
	f.Add(uint8(0x82), []byte{0x00, 0, 0, 0, 1, 0, 0, 2, 0}, make([]byte, 1024), uint16(1024), false)
	f.Add(uint8(0x83), []byte{0x08, 0, 0, 0, 3, 0, 0, 1, 0}, bytes.Repeat([]byte{7}, 512), uint16(0), false)
	f.Add(uint8(0x87), []byte{0x00, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0}, make([]byte, 8192), uint16(0), true)
	f.Add(uint8(0x8B), []byte{0x02, 0, 0, 0, 0, 0, 0, 1, 0}, make([]byte, 512), uint16(0), false)
	f.Add(uint8(0x8B), []byte{0x06, 0, 0, 0, 0, 0, 0, 4, 0}, make([]byte, 512), uint16(0), false)
	f.Add(uint8(0x8F), []byte{0x08, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0}, make([]byte, 4096), uint16(0), true)
	f.Add(uint8(0x8F), []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0}, []byte(nil), uint16(0), false)
	f.Add(uint8(0x90), []byte{0x00, 0, 0, 0, 0, 0, 0, 24, 0}, []byte{0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0}, uint16(0), false)
	f.Add(uint8(0x91), []byte{0x00, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0}, make([]byte, 1024), uint16(0), false)
	f.Add(uint8(0x92), []byte{0x00, 0, 0, 0x01, 0}, []byte(nil), uint16(0), false)
	f.Add(uint8(0x8C), []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}, []byte(nil), uint16(0), false)

	luns := map[bool]*fuzzLU{false: newFuzzLU(f, 512), true: newFuzzLU(f, 4096)}
	f.Fuzz(func(t *testing.T, sel uint8, tail, dataOut []byte, inLen uint16, big bool) {
		l := luns[big]
		op := fuzzOpcodes[int(sel&0x7F)%len(fuzzOpcodes)]
		cdb := make([]byte, 16)
		cdb[0] = op
		copy(cdb[1:], tail)
		length := cdbLengthOf(op)
		if sel&0x80 != 0 {
			switch length {
			case 10:
				cdb[2], cdb[3], cdb[4], cdb[7] = 0, 0, 0, 0
			case 12:
				cdb[2], cdb[3], cdb[4], cdb[6], cdb[7], cdb[8] = 0, 0, 0, 0, 0, 0
			case 16:
				clear(cdb[2:9])
				cdb[10], cdb[11], cdb[12] = 0, 0, 0
			}
			cdb[length-1] = 0 // CONTROL
		}
		before := l.medium(t)
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: cdb[:length], DataOut: dataOut,
			DataIn: make([]byte, int(inLen)%(40<<10))}
		l.m.Execute(c)
		after := l.medium(t)

		switch c.Status {
		case StatusGood:
		case StatusCheckCondition:
			s, ok := ParseSense(c.SenseData())
			if !ok {
				t.Fatalf("% x: sense data does not parse: % x", cdb[:length], c.SenseData())
			}
			if s.Key != SenseIllegalRequest && s.Key != SenseMiscompare {
				t.Fatalf("% x: unexpected sense key %#x", cdb[:length], s.Key)
			}
			if !bytes.Equal(before, after) {
				t.Fatalf("% x: a failed command changed the medium", cdb[:length])
			}
		default:
			t.Fatalf("% x: status %v", cdb[:length], c.Status)
		}
		if c.DataInLength < 0 || c.DataInLength > len(c.DataIn) || c.DataInLength > c.TransferLength ||
			c.DataInLength%l.bs != 0 || c.TransferLength < 0 {
			t.Fatalf("% x: DataInLength %d TransferLength %d buffer %d", cdb[:length], c.DataInLength, c.TransferLength, len(c.DataIn))
		}
		if c.Status != StatusGood {
			return
		}
		var lba uint64
		switch length {
		case 6:
			lba = uint64(cdb[1]&0x1F)<<16 | uint64(cdb[2])<<8 | uint64(cdb[3])
		case 10, 12:
			lba = uint64(binary.BigEndian.Uint32(cdb[2:]))
		case 16:
			lba = binary.BigEndian.Uint64(cdb[2:])
		}
		switch op {
		case 0x08, 0x28, 0xA8, 0x88:
			if c.DataInLength > 0 && !bytes.Equal(c.DataIn[:c.DataInLength], after[lba*uint64(l.bs):][:c.DataInLength]) {
				t.Fatalf("% x: READ returned other bytes than the medium holds", cdb[:length])
			}
		case 0x0A, 0x2A, 0xAA, 0x8A, 0x2E, 0x8E:
			if len(dataOut) > 0 && !bytes.Equal(dataOut, after[lba*uint64(l.bs):][:len(dataOut)]) {
				t.Fatalf("% x: WRITE left other bytes on the medium", cdb[:length])
			}
		}
	})
}

// FuzzUnmapParams sends UNMAP parameter lists with random lengths and descriptors to a medium full
// of data and checks the outcome against an independent reading of SBC-3: a good UNMAP zeroes
// exactly the blocks of its descriptors and keeps every other block; a refused one changes
// nothing and says ILLEGAL REQUEST; lengths 1 to 7 are PARAMETER LIST LENGTH ERROR.
func FuzzUnmapParams(f *testing.F) {
	f.Add(uint16(24), []byte{0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 4, 0, 0, 0, 0})
	f.Add(uint16(40), []byte{0, 38, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 4, 0, 0, 0, 0})
	f.Add(uint16(8), []byte{0, 6, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(5), []byte{0, 6, 0, 0, 0})
	f.Add(uint16(0), []byte(nil))
	f.Add(uint16(28), []byte{0, 26, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 9, 0, 0, 0, 0, 1, 2, 3, 4})
	f.Add(uint16(24), []byte{0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 0, 0, 0, 2, 0, 0, 0, 0})

	l := newFuzzLU(f, 512)
	orig := testutil.Pattern(fuzzBlocks*512, 0x3C)
	for i := range orig {
		orig[i] |= 1 // no zero bytes, so that any unmapped byte shows
	}
	f.Fuzz(func(t *testing.T, paramLen uint16, list []byte) {
		if err := l.mem.WriteAt(orig, 0, false); err != nil {
			t.Fatal(err)
		}
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: unmapCDB(paramLen), DataOut: list}
		l.m.Execute(c)
		after := l.medium(t)
		if c.TransferLength != int(paramLen) {
			t.Fatalf("TransferLength %d for parameter list length %d", c.TransferLength, paramLen)
		}
		if c.Status == StatusCheckCondition {
			s, ok := ParseSense(c.SenseData())
			if !ok || s.Key != SenseIllegalRequest {
				t.Fatalf("sense % x", c.SenseData())
			}
			if paramLen >= 1 && paramLen < 8 && (s.ASC != 0x1A || s.ASCQ != 0) {
				t.Fatalf("parameter list length %d: ASC %#x/%#x", paramLen, s.ASC, s.ASCQ)
			}
			if !bytes.Equal(after, orig) {
				t.Fatal("a refused UNMAP changed the medium")
			}
			return
		}
		if c.Status != StatusGood {
			t.Fatalf("status %v", c.Status)
		}
		if paramLen >= 1 && paramLen < 8 {
			t.Fatalf("parameter list length %d accepted", paramLen)
		}
		want := append([]byte(nil), orig...)
		if paramLen >= 8 {
			p := list[:paramLen]
			count := int(binary.BigEndian.Uint16(p[2:])) / 16
			for i := 0; i < count; i++ {
				d := p[8+16*i:]
				lba := binary.BigEndian.Uint64(d)
				n := uint64(binary.BigEndian.Uint32(d[8:]))
				if lba >= fuzzBlocks || n > fuzzBlocks-lba {
					t.Fatalf("descriptor %d (LBA %d, %d blocks) outside the medium accepted", i, lba, n)
				}
				clear(want[lba*512 : (lba+n)*512])
			}
		}
		if !bytes.Equal(after, want) {
			t.Fatal("a good UNMAP zeroed other blocks than its descriptors name")
		}
	})
}
