package scsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore"
)

// getLBAStatusCDB is GET LBA STATUS from lba with an allocation length of alloc bytes.
func getLBAStatusCDB(lba uint64, alloc uint32) []byte {
	c := []byte{0x9E, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(c[2:], lba)
	binary.BigEndian.PutUint32(c[10:], alloc)
	return c
}

// lbaDesc is one LBA status descriptor: the first LBA, the number of blocks and the
// provisioning status.
type lbaDesc struct {
	lba    uint64
	blocks uint32
	status byte
}

// lbaStatusData is the parameter data of GET LBA STATUS holding descs (SBC-3 5.7.2).
func lbaStatusData(descs ...lbaDesc) []byte {
	p := make([]byte, 8+16*len(descs))
	binary.BigEndian.PutUint32(p, uint32(4+16*len(descs)))
	for i, d := range descs {
		binary.BigEndian.PutUint64(p[8+16*i:], d.lba)
		binary.BigEndian.PutUint32(p[8+16*i+8:], d.blocks)
		p[8+16*i+12] = d.status
	}
	return p
}

// TestGetLBAStatus checks the descriptors over a memory store of 16384 blocks of 512 bytes (eight
// 1 MiB chunks of 2048 blocks) in which chunks 2 and 5 hold data: with thin provisioning the
// runs of the chunk map, as many as the allocation length holds; without it one mapped run.
func TestGetLBAStatus(t *testing.T) {
	const blocks = 16384
	setup := func(t *testing.T, thin bool) *LUNMap {
		_, m, mem := newMemLU(t, blocks, 512, func(c *Config) { c.ThinProvisioning = thin })
		writeMedium(t, mem, (2*2048+5)*512, fill(512, 1))
		writeMedium(t, mem, (5*2048+2047)*512, fill(512, 2))
		return m
	}
	all := []lbaDesc{{0, 4096, 1}, {4096, 2048, 0}, {6144, 4096, 1}, {10240, 2048, 0}, {12288, 4096, 1}}
	for _, tc := range []struct {
		name  string
		thin  bool
		lba   uint64
		alloc uint32
		want  []byte
	}{
		{"all runs", true, 0, 1024, lbaStatusData(all...)},
		{"one descriptor", true, 0, 24, lbaStatusData(all[0])},
		{"two descriptors", true, 0, 40, lbaStatusData(all[:2]...)},
		{"a partial descriptor is not returned", true, 0, 8 + 16*2 + 15, lbaStatusData(all[:2]...)},
		{"from inside a mapped run", true, 5000, 1024, lbaStatusData(append([]lbaDesc{{5000, 1144, 0}}, all[2:]...)...)},
		{"last block", true, blocks - 1, 1024, lbaStatusData(lbaDesc{blocks - 1, 1, 1})},
		{"allocation length shorter than a descriptor", true, 0, 12, lbaStatusData(all[0])[:12]},
		{"allocation length zero", true, 0, 0, []byte{}},
		{"fully provisioned: everything mapped", false, 0, 1024, lbaStatusData(lbaDesc{0, blocks, 0})},
		{"fully provisioned from an LBA", false, 100, 1024, lbaStatusData(lbaDesc{100, blocks - 100, 0})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := setup(t, tc.thin)
			c := exec(m, getLBAStatusCDB(tc.lba, tc.alloc), nil, 4096)
			requireData(t, c, tc.want, len(tc.want))
		})
	}

	t.Run("LBA out of range", func(t *testing.T) {
		m := setup(t, true)
		checkSense(t, exec(m, getLBAStatusCDB(blocks, 1024), nil, 4096), lbaOutOfRange)
		checkSense(t, exec(m, getLBAStatusCDB(^uint64(0), 1024), nil, 4096), lbaOutOfRange)
	})
	t.Run("REPORT TYPE is reserved", func(t *testing.T) {
		m := setup(t, true)
		cdb := getLBAStatusCDB(0, 1024)
		cdb[14] = 0x02
		checkSense(t, exec(m, cdb, nil, 4096), invalidCDB(14, 1))
	})
}

// TestGetLBAStatusLongRuns checks that a run longer than the NUMBER OF LOGICAL BLOCKS field holds
// is split into descriptors of FFFFFFFFh blocks: 2^33 blocks (4 TiB, sparse in RAM) are three
// descriptors.
func TestGetLBAStatusLongRuns(t *testing.T) {
	_, m, _ := newMemLU(t, 1<<33, 512, func(c *Config) { c.ThinProvisioning = true })
	c := exec(m, getLBAStatusCDB(0, 1024), nil, 1024)
	want := lbaStatusData(lbaDesc{0, 0xFFFFFFFF, 1}, lbaDesc{0xFFFFFFFF, 0xFFFFFFFF, 1}, lbaDesc{0x1FFFFFFFE, 2, 1})
	requireData(t, c, want, len(want))
}

// TestGetLBAStatusAtMost64Descriptors checks the bound of one answer on a medium that alternates
// between data and holes chunk by chunk: 64 descriptors, and the next command goes on from
// where the answer stopped.
func TestGetLBAStatusAtMost64Descriptors(t *testing.T) {
	const chunks = 100
	_, m, mem := newMemLU(t, chunks*2048, 512, func(c *Config) { c.ThinProvisioning = true })
	for i := 0; i < chunks; i += 2 {
		writeMedium(t, mem, int64(i)<<20, fill(512, 9))
	}
	var descs []lbaDesc
	for i := 0; i < 64; i++ {
		descs = append(descs, lbaDesc{uint64(i) * 2048, 2048, byte(i % 2)})
	}
	c := exec(m, getLBAStatusCDB(0, 0xFFFF), nil, 0xFFFF)
	want := lbaStatusData(descs...)
	requireData(t, c, want, len(want))
	c = exec(m, getLBAStatusCDB(64*2048, 24), nil, 24)
	want = lbaStatusData(lbaDesc{64 * 2048, 2048, 0})
	requireData(t, c, want, len(want))
}

// failingMapper is a store whose map cannot be read.
type failingMapper struct {
	backstore.Backstore
}

func (failingMapper) Mapping(off, limit int64) (bool, int64, error) {
	return false, 0, fmt.Errorf("mapping at %d: %w", off, unix.EIO)
}

// TestGetLBAStatusSources checks where the answer comes from: a store without a map has every
// block mapped (a block device), and a map that fails ends the command with MEDIUM ERROR and the
// LBA in INFORMATION.
func TestGetLBAStatusSources(t *testing.T) {
	thin := func(c *Config) { c.ThinProvisioning = true }
	mem, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	_, m := newLUOver(t, &capsStore{Backstore: mem, caps: mem.Capabilities()}, thin)
	want := lbaStatusData(lbaDesc{3, 61, 0})
	requireData(t, exec(m, getLBAStatusCDB(3, 1024), nil, 1024), want, len(want))

	mem, err = backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	_, m = newLUOver(t, failingMapper{mem}, thin)
	checkSense(t, exec(m, getLBAStatusCDB(7, 1024), nil, 1024), readErrorAt(7))
}

// TestGetLBAStatusFileHoles runs UNMAP and GET LBA STATUS over a file backstore: the punched
// range is reported deallocated, in whole filesystem blocks, the written blocks around it mapped.
func TestGetLBAStatusFileHoles(t *testing.T) {
	f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "lun.img"),
		backstore.FileOptions{Size: 4 << 20, Create: true, LogicalBlockSize: 4096})
	require.NoError(t, err)
	_, m := newLUOver(t, f, func(c *Config) { c.ThinProvisioning = true })
	want := lbaStatusData(lbaDesc{0, 1024, 1})
	requireData(t, exec(m, getLBAStatusCDB(0, 1024), nil, 1024), want, len(want))

	checkGood(t, exec(m, cdb10(0x2A, 0, 0, 64), bytes.Repeat([]byte{0x5A}, 64*4096), 0))
	checkGood(t, exec(m, unmapCDB(24), unmapList([2]uint64{16, 8}), 0))
	c := exec(m, getLBAStatusCDB(0, 1024), nil, 1024)
	want = lbaStatusData(lbaDesc{0, 16, 0}, lbaDesc{16, 8, 1}, lbaDesc{24, 40, 0}, lbaDesc{64, 960, 1})
	if c.Status == StatusGood && !bytes.Equal(data(c), want) && bytes.Equal(data(c), lbaStatusData(lbaDesc{0, 64, 0}, lbaDesc{64, 960, 1})) {
		t.Skip("the filesystem of the test directory does not punch holes")
	}
	requireData(t, c, want, len(want))
}

// TestPreFetch checks PRE-FETCH(10/16): GOOD for a range inside the medium (a length of zero is
// to the end), with IMMED or not, LOGICAL BLOCK ADDRESS OUT OF RANGE past it, and that nothing
// reaches the backstore.
func TestPreFetch(t *testing.T) {
	_, m, rec := newRecordingLU(t, 1024, 512, nil)
	for _, tc := range []struct {
		name string
		cdb  []byte
		good bool
	}{
		{"10: range", cdb10(0x34, 0, 10, 20), true},
		{"10: IMMED", cdb10(0x34, 0x02, 10, 20), true},
		{"10: to the end", cdb10(0x34, 0, 1023, 0), true},
		{"10: whole medium", cdb10(0x34, 0, 0, 1024), true},
		{"10: one block past the end", cdb10(0x34, 0, 1000, 25), false},
		{"10: LBA past the end", cdb10(0x34, 0, 1024, 0), false},
		{"16: range", cdb16(0x90, 0, 0, 1024), true},
		{"16: IMMED to the end", cdb16(0x90, 0x02, 512, 0), true},
		{"16: huge LBA", cdb16(0x90, 0, 1<<40, 1), false},
		{"16: length past the end", cdb16(0x90, 0, 1, 1024), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := exec(m, tc.cdb, nil, 0)
			if tc.good {
				checkGood(t, c)
			} else {
				checkSense(t, c, lbaOutOfRange)
			}
			require.Zero(t, c.TransferLength)
			require.Empty(t, rec.take())
		})
	}
}

// TestReadDefectData checks READ DEFECT DATA(10/12): an empty list whose header echoes the lists
// and the format asked for, truncated to the allocation length; the reserved format 111b is
// refused.
func TestReadDefectData(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []struct {
		name string
		cdb  []byte
		want []byte
	}{
		{"10: both lists, long block format", []byte{0x37, 0, 0x1B, 0, 0, 0, 0, 0, 4, 0}, []byte{0, 0x1B, 0, 0}},
		{"10: grown list, short block format", []byte{0x37, 0, 0x08, 0, 0, 0, 0, 0xFF, 0xFF, 0}, []byte{0, 0x08, 0, 0}},
		{"10: no list, bytes from index", []byte{0x37, 0, 0x04, 0, 0, 0, 0, 0, 4, 0}, []byte{0, 0x04, 0, 0}},
		{"10: truncated", []byte{0x37, 0, 0x10, 0, 0, 0, 0, 0, 2, 0}, []byte{0, 0x10}},
		{"10: allocation length zero", []byte{0x37, 0, 0x10, 0, 0, 0, 0, 0, 0, 0}, []byte{}},
		{"12: primary list, physical sector", []byte{0xB7, 0x15, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, []byte{0, 0x15, 0, 0, 0, 0, 0, 0}},
		{"12: any address descriptor index", []byte{0xB7, 0x1B, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 1, 0, 0, 0}, []byte{0, 0x1B, 0, 0, 0, 0, 0, 0}},
		{"12: truncated", []byte{0xB7, 0x18, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0}, []byte{0, 0x18, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireData(t, exec(m, tc.cdb, nil, 512), tc.want, len(tc.want))
		})
	}
	checkSense(t, exec(m, []byte{0x37, 0, 0x1F, 0, 0, 0, 0, 0, 4, 0}, nil, 512), invalidCDB(2, 2))
	checkSense(t, exec(m, []byte{0xB7, 0x07, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, nil, 512), invalidCDB(1, 2))
}

// TestVerify12 checks that VERIFY(12) and WRITE AND VERIFY(12) do what their 10- and 16-byte
// forms do: compare the medium with the data-out buffer (MISCOMPARE and its offset), and write
// then read back.
func TestVerify12(t *testing.T) {
	_, m, mem := newMemLU(t, 64, 512, nil)
	blk := fill(1024, 0x3C)
	checkGood(t, exec(m, cdb12(0xAE, 0x02, 4, 2), blk, 0))
	require.Equal(t, blk, readMedium(t, mem, 4*512, 1024))
	checkGood(t, exec(m, cdb12(0xAF, 0x02, 4, 2), blk, 0))
	checkGood(t, exec(m, cdb12(0xAF, 0x00, 4, 2), nil, 0))
	other := bytes.Clone(blk)
	other[700] = 0
	checkSense(t, exec(m, cdb12(0xAF, 0x02, 4, 2), other, 0), miscompareAt(700))
	checkSense(t, exec(m, cdb12(0xAF, 0x02, 63, 2), blk, 0), lbaOutOfRange)
	checkSense(t, exec(m, cdb12(0xAF, 0x08, 4, 2), blk, 0), invalidCDB(1, 3))
	checkSense(t, exec(m, cdb12(0xAE, 0x04, 4, 2), blk, 0), invalidCDB(1, 2))
	c := exec(m, cdb12(0xAF, 0x02, 4, 2), blk, 0)
	c.CDB[10] = 0x80
	checkSense(t, exec(m, c.CDB, blk, 0), invalidCDB(10, 7))
}

// TestNewSBCCommandsReservationClass pins how a persistent reservation treats the commands of
// this change: the ones that read the medium or its layout as reads, WRITE AND VERIFY(12) as a
// write.
func TestNewSBCCommandsReservationClass(t *testing.T) {
	for _, name := range []string{"VERIFY(12)", "PRE-FETCH(10)", "PRE-FETCH(16)", "READ DEFECT DATA(10)", "READ DEFECT DATA(12)", "GET LBA STATUS"} {
		found := false
		for i := range sbcCommands {
			if op := &sbcCommands[i]; op.name == name {
				found = true
				require.Equal(t, opPRReads, op.flags, name)
			}
		}
		require.True(t, found, name)
	}
	require.Equal(t, opWritesMedium, lookupByOpcode(opWriteAndVerify12, 0, false).flags)
}
