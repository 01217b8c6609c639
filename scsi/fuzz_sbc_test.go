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
	0x2E, 0xAE, 0x8E, 0x2F, 0xAF, 0x8F, // WRITE AND VERIFY, VERIFY
	0x34, 0x90, // PRE-FETCH
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
		case 0x0A, 0x2A, 0xAA, 0x8A, 0x2E, 0xAE, 0x8E:
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

// FuzzGetLBAStatus writes a random pattern of chunks to a thin memory LU of 16 MiB (sixteen 1 MiB
// chunks of 2048 blocks of 512 bytes) and sends GET LBA STATUS with random fields. A good answer
// must be what SBC-3 and the chunk map say: a PARAMETER DATA LENGTH of 4 plus 16 per descriptor,
// at least one descriptor and no more than the allocation length holds (or 64), the first at
// the STARTING LOGICAL BLOCK ADDRESS, each next one where the previous ended, none past the
// capacity, neighbours in different states, each block deallocated exactly when its chunk is
// absent. A refused one is ILLEGAL REQUEST with no data.
func FuzzGetLBAStatus(f *testing.F) {
	f.Add(uint16(0x5A5A), uint64(0), uint32(1024), byte(0), byte(0))
	f.Add(uint16(0x0001), uint64(2047), uint32(24), byte(0), byte(0))
	f.Add(uint16(0xFFFF), uint64(32767), uint32(7), byte(0), byte(0))
	f.Add(uint16(0x0F0F), uint64(32768), uint32(1024), byte(0), byte(0))
	f.Add(uint16(0x0F0F), uint64(5), uint32(1024), byte(0x1F), byte(0x03))
	const chunkBlocks, chunks = 2048, 16
	f.Fuzz(func(t *testing.T, pattern uint16, lba uint64, alloc uint32, b1, b14 byte) {
		mem, err := backstore.NewMemory(chunks<<20, 512)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < chunks; i++ {
			if pattern>>i&1 != 0 {
				if err := mem.WriteAt([]byte{1}, int64(i)<<20+int64(pattern)%(1<<20), false); err != nil {
					t.Fatal(err)
				}
			}
		}
		lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: "fuzz", ThinProvisioning: true})
		if err != nil {
			t.Fatal(err)
		}
		defer lu.Close()
		m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}})
		if err != nil {
			t.Fatal(err)
		}
		m.Execute(&Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: make([]byte, 6)}) // unit attention
		cdb := getLBAStatusCDB(lba, alloc)
		cdb[1] = 0x12 | b1&0xE0
		cdb[14] = b14
		c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: cdb, DataIn: make([]byte, 2048)}
		m.Execute(c)
		checkResult(t, c)
		if c.Status != StatusGood {
			s, _ := ParseSense(c.SenseData())
			if s.Key != SenseIllegalRequest {
				t.Fatalf("% x: sense key %#x", cdb, s.Key)
			}
			return
		}
		if b1&0xE0 != 0 || b14 != 0 || lba >= chunks*chunkBlocks {
			t.Fatalf("% x: GOOD for a bad CDB", cdb)
		}
		d := data(c)
		full := make([]byte, 8+64*16)
		// The answer, when not truncated, is a whole parameter list; truncated, a prefix of one.
		if alloc < 8 {
			if len(d) != int(alloc) {
				t.Fatalf("% x: %d bytes for an allocation length of %d", cdb, len(d), alloc)
			}
			return
		}
		copy(full, d)
		n := int(binary.BigEndian.Uint32(full)) - 4
		if n <= 0 || n%16 != 0 || n/16 > 64 {
			t.Fatalf("% x: PARAMETER DATA LENGTH %d", cdb, n+4)
		}
		descs := n / 16
		if alloc >= 24 && uint32(8+16*descs) > alloc {
			t.Fatalf("% x: %d descriptors do not fit an allocation length of %d", cdb, descs, alloc)
		}
		if len(d) != min(int(alloc), 8+n) {
			t.Fatalf("% x: %d bytes, want %d", cdb, len(d), min(int(alloc), 8+n))
		}
		next := lba
		prev := byte(0xFF)
		for i := 0; i < descs && 8+16*(i+1) <= len(d); i++ {
			e := d[8+16*i:]
			start, count, status := binary.BigEndian.Uint64(e), uint64(binary.BigEndian.Uint32(e[8:])), e[12]
			if start != next || count == 0 || start+count > chunks*chunkBlocks || status > 1 || status == prev {
				t.Fatalf("% x: descriptor %d: LBA %d, %d blocks, status %d (want LBA %d, previous status %d)", cdb, i, start, count, status, next, prev)
			}
			for b := start; b < start+count; b++ {
				if mapped := pattern>>(b/chunkBlocks)&1 != 0; mapped != (status == 0) {
					t.Fatalf("% x: block %d reported with status %d, its chunk mapped %v", cdb, b, status, mapped)
				}
			}
			next, prev = start+count, status
		}
	})
}
