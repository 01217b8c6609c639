package scsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// cawCDB is COMPARE AND WRITE of n blocks at lba with byte 1 b1.
func cawCDB(b1 byte, lba uint64, n byte) []byte {
	c := make([]byte, 16)
	c[0], c[1] = 0x89, b1
	binary.BigEndian.PutUint64(c[2:], lba)
	c[13] = n
	return c
}

// TestCompareAndWrite checks the exchange at 512- and 4096-byte blocks, for one block and for
// the maximum of 255 blocks (which the device server compares through several scratch buffers),
// including a miscompare in a later buffer, which reports its offset and writes nothing.
func TestCompareAndWrite(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		for _, n := range []int{1, 255} {
			t.Run(fmt.Sprint(bs, "/", n), func(t *testing.T) {
				_, m, rec := newRecordingLU(t, 512, uint32(bs), nil)
				old := testutil.Pattern(n*bs, 1)
				writeMedium(t, rec, int64(7*bs), old)
				rec.take()
				next := testutil.Pattern(n*bs, 2)

				c := exec(m, cawCDB(0x00, 7, byte(n)), append(append([]byte(nil), old...), next...), 0)
				checkGood(t, c)
				require.Equal(t, 2*n*bs, c.TransferLength)
				ops := rec.take()
				require.Equal(t, ioRecord{op: "write", off: int64(7 * bs), len: int64(n * bs)}, ops[len(ops)-1])
				for _, op := range ops[:len(ops)-1] {
					require.Equal(t, "read", op.op)
				}
				require.Equal(t, next, readMedium(t, rec, int64(7*bs), n*bs))
				rec.take()

				// The medium now holds next: comparing with old fails at byte 0 of the first
				// block, comparing with next altered at the end fails there.
				c = exec(m, cawCDB(0x00, 7, byte(n)), append(append([]byte(nil), old...), old...), 0)
				checkSense(t, c, miscompareAt(0))
				bad := append([]byte(nil), next...)
				bad[len(bad)-1] ^= 1
				c = exec(m, cawCDB(0x10, 7, byte(n)), append(bad, old...), 0)
				checkSense(t, c, miscompareAt(uint64(n*bs-1)))
				for _, op := range rec.take() {
					require.Equal(t, "read", op.op)
				}
				require.Equal(t, next, readMedium(t, rec, int64(7*bs), n*bs))
			})
		}
	}
}

// TestCompareAndWriteFUA checks that FUA, or a disabled write cache, forces the write.
func TestCompareAndWriteFUA(t *testing.T) {
	for _, wce := range []bool{true, false} {
		_, m, rec := newRecordingLU(t, 16, 512, func(c *Config) { c.WriteCache = wce })
		for _, b1 := range []byte{0x00, 0x08, 0x02} { // plain, FUA, FUA_NV (ignored)
			cur := readMedium(t, rec, 512, 512)
			rec.take()
			checkGood(t, exec(m, cawCDB(b1, 1, 1), append(cur, fill(512, b1+1)...), 0))
			require.Equal(t, []ioRecord{
				{op: "read", off: 512, len: 512},
				{op: "write", off: 512, len: 512, fua: b1 == 0x08 || !wce},
			}, rec.take())
		}
	}
}

// TestCompareAndWriteErrors checks the refusals of COMPARE AND WRITE and the no-op of zero blocks.
func TestCompareAndWriteErrors(t *testing.T) {
	_, m, rec := newRecordingLU(t, 64, 512, nil)
	tests := []struct {
		name    string
		cdb     []byte
		dataOut []byte
		want    senseWant
	}{
		{"past the end", cawCDB(0, 63, 2), make([]byte, 2048), lbaOutOfRange},
		{"at capacity", cawCDB(0, 64, 1), make([]byte, 1024), lbaOutOfRange},
		{"wraps", cawCDB(0, 0xFFFFFFFFFFFFFFFF, 2), make([]byte, 2048), lbaOutOfRange},
		{"one block of data-out", cawCDB(0, 0, 1), make([]byte, 512), invalidIU},
		{"no data-out", cawCDB(0, 0, 1), nil, invalidIU},
		{"three blocks", cawCDB(0, 0, 1), make([]byte, 1536), invalidIU},
	}
	for _, tt := range tests {
		c := exec(m, tt.cdb, tt.dataOut, 0)
		checkSense(t, c, tt.want)
		require.Empty(t, rec.take(), tt.name)
	}
	c := exec(m, cawCDB(0, 5, 0), nil, 0)
	checkGood(t, c)
	require.Zero(t, c.TransferLength)
	require.Empty(t, rec.take())
}

// TestCompareAndWriteLimit checks MAXIMUM COMPARE AND WRITE LENGTH: 255 blocks, less when the
// 2n-block data-out would exceed the maximum transfer, 0 when not even one block pair fits, and
// that a longer NUMBER OF LOGICAL BLOCKS is INVALID FIELD IN CDB on byte 13.
func TestCompareAndWriteLimit(t *testing.T) {
	lu, _, _ := newMemLU(t, 64, 512, nil)
	require.Equal(t, uint8(255), lu.maxCompareAndWriteBlocks())

	lu, m, _ := newMemLU(t, 64, 512, func(c *Config) { c.MaxTransferBytes = 8192 })
	require.Equal(t, uint8(8), lu.maxCompareAndWriteBlocks())
	checkSense(t, exec(m, cawCDB(0, 0, 9), make([]byte, 9*1024), 0), invalidCDB(13, -1))
	checkGood(t, exec(m, cawCDB(0, 0, 8), make([]byte, 8*1024), 0))

	lu, m, _ = newMemLU(t, 64, 4096, func(c *Config) { c.MaxTransferBytes = 4096 })
	require.Zero(t, lu.maxCompareAndWriteBlocks())
	checkSense(t, exec(m, cawCDB(0, 0, 1), make([]byte, 8192), 0), invalidCDB(13, -1))
}

// cawTag marks the blocks COMPARE AND WRITE writes in TestCompareAndWriteAtomic; WRITE's blocks
// have it clear.
const cawTag = 1 << 63

// atomicityChecker is a backstore that makes interleavings visible and checks that COMPARE AND
// WRITE is atomic. It writes block by block and yields between blocks and after reads, so that
// commands that are not kept apart do interleave. The first 8 bytes of every block written are a
// tag; at the start of each write whose tag has cawTag, it checks that no other write is in
// progress and that the medium still holds what that COMPARE AND WRITE compared (which the test
// registers in expect before it sends the command); at the start of other writes it checks that
// no COMPARE AND WRITE write is in progress.
type atomicityChecker struct {
	backstore.Backstore
	bs int

	mu          sync.Mutex
	writing     int // writes in progress
	cawWriting  int // of which COMPARE AND WRITE writes
	expect      map[uint64][]byte
	violations  []string
	cawsWritten int
}

func (a *atomicityChecker) ReadAt(p []byte, off int64) error {
	err := a.Backstore.ReadAt(p, off)
	runtime.Gosched()
	return err
}

func (a *atomicityChecker) WriteAt(p []byte, off int64, fua bool) error {
	tag := binary.BigEndian.Uint64(p)
	isCAW := tag&cawTag != 0
	a.mu.Lock()
	if isCAW {
		a.cawsWritten++
		if a.writing > 0 {
			a.violations = append(a.violations, fmt.Sprintf("COMPARE AND WRITE %x wrote while %d other writes were in progress", tag, a.writing))
		}
		cur := make([]byte, len(p))
		if err := a.Backstore.ReadAt(cur, off); err != nil {
			a.mu.Unlock()
			return err
		}
		if want, ok := a.expect[tag]; !ok || !bytes.Equal(cur, want) {
			a.violations = append(a.violations, fmt.Sprintf("COMPARE AND WRITE %x: the medium changed between the compare and the write", tag))
		}
		a.cawWriting++
	} else if a.cawWriting > 0 {
		a.violations = append(a.violations, fmt.Sprintf("WRITE %x started during a COMPARE AND WRITE write", tag))
	}
	a.writing++
	a.mu.Unlock()

	var err error
	for i := 0; i < len(p) && err == nil; i += a.bs {
		err = a.Backstore.WriteAt(p[i:i+a.bs], off+int64(i), fua)
		runtime.Gosched()
	}

	a.mu.Lock()
	a.writing--
	if isCAW {
		a.cawWriting--
	}
	a.mu.Unlock()
	return err
}

// tagged returns n blocks of bs bytes each starting with tag and filled with its low byte.
func tagged(n, bs int, tag uint64) []byte {
	p := fill(n*bs, byte(tag))
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(p[i*bs:], tag)
	}
	return p
}

// TestCompareAndWriteAtomic runs COMPARE AND WRITEs from several nexuses against a stream of
// WRITEs to the same two blocks, under -race. Every COMPARE AND WRITE compares what it last read,
// so many succeed and many miscompare; the checking backstore verifies that none of the
// successful ones let a WRITE in between its compare and its write or during its write, and the
// two blocks never end up torn between two commands.
func TestCompareAndWriteAtomic(t *testing.T) {
	const (
		bs      = 512
		n       = 2
		lba     = 10
		writes  = 300
		workers = 3
		rounds  = 200
	)
	mem, err := backstore.NewMemory(64*bs, bs)
	require.NoError(t, err)
	chk := &atomicityChecker{Backstore: mem, bs: bs, expect: make(map[uint64][]byte)}
	writeMedium(t, mem, lba*bs, tagged(n, bs, 0))
	_, m := newLUOver(t, chk, nil)

	var g errgroup.Group
	g.Go(func() error {
		for i := 1; i <= writes; i++ {
			c := run(m, otherNexus, 0, cdb10(0x2A, 0, lba, n), tagged(n, bs, uint64(i)), 0)
			if c.Status != StatusGood {
				return fmt.Errorf("WRITE: status %v sense % x", c.Status, c.SenseData())
			}
		}
		return nil
	})
	nexuses := []*Nexus{testNexus, otherNexus, {InitiatorPort: "third", Port: testPort}}
	successes := make([]int, workers)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			nx := nexuses[w]
			if w == 2 {
				run(m, nx, 0, make([]byte, 6), nil, 0) // consume the power-on unit attention
			}
			for i := 0; i < rounds; i++ {
				rd := run(m, nx, 0, cdb10(0x28, 0, lba, n), nil, n*bs)
				if rd.Status != StatusGood {
					return fmt.Errorf("READ: status %v sense % x", rd.Status, rd.SenseData())
				}
				tag := cawTag | uint64(w)<<32 | uint64(i)
				chk.mu.Lock()
				chk.expect[tag] = append([]byte(nil), rd.DataIn...)
				chk.mu.Unlock()
				c := run(m, nx, 0, cawCDB(0, lba, n), append(rd.DataIn, tagged(n, bs, tag)...), 0)
				switch {
				case c.Status == StatusGood:
					successes[w]++
				case c.Status == StatusCheckCondition && c.Sense[2]&0x0F == 0x0E && c.Sense[12] == 0x1D:
				default:
					return fmt.Errorf("COMPARE AND WRITE: status %v sense % x", c.Status, c.SenseData())
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	chk.mu.Lock()
	defer chk.mu.Unlock()
	require.Zero(t, len(chk.violations), "%d violations, the first: %q", len(chk.violations),
		chk.violations[:min(3, len(chk.violations))])
	total := 0
	for _, s := range successes {
		total += s
	}
	require.Positive(t, total, "no COMPARE AND WRITE succeeded: the test exercised nothing")
	require.Equal(t, total, chk.cawsWritten)
	final := readMedium(t, mem, lba*bs, n*bs)
	require.Equal(t, binary.BigEndian.Uint64(final), binary.BigEndian.Uint64(final[bs:]), "torn blocks")
	t.Logf("%d COMPARE AND WRITEs succeeded out of %d", total, workers*rounds)
}

// cawStore is a memory backstore with a compare-and-write of its own for up to max bytes, as
// an RBD image has (librbd's, one 512-byte sector): it counts the calls.
type cawStore struct {
	backstore.Backstore
	max   int
	calls int
}

func (s *cawStore) CompareAndWriteMax() int { return s.max }

func (s *cawStore) CompareAndWrite(cmp, data []byte, off int64) (int64, error) {
	s.calls++
	cur := make([]byte, len(cmp))
	if err := s.ReadAt(cur, off); err != nil {
		return 0, err
	}
	if i := firstDifference(cur, cmp); i >= 0 {
		return int64(i), backstore.ErrMiscompare
	}
	return 0, s.WriteAt(data, off, false)
}

// TestCompareAndWriteByTheStore: a store with its own compare-and-write (atomic against its
// other clients, which the range lock does not see) does the command; MAXIMUM COMPARE AND WRITE
// LENGTH is what it takes in blocks, 0 (not supported) when a block is more than that.
func TestCompareAndWriteByTheStore(t *testing.T) {
	mem, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	st := &cawStore{Backstore: mem, max: 512}
	lu, m := newLUOver(t, st, nil)
	require.Equal(t, uint8(1), lu.maxCompareAndWriteBlocks())
	old, next := testutil.Pattern(512, 1), testutil.Pattern(512, 2)
	require.NoError(t, mem.WriteAt(old, 5*512, false))
	checkGood(t, exec(m, cawCDB(0, 5, 1), cat(old, next), 0))
	bad := append([]byte(nil), next...)
	bad[300] ^= 1
	checkSense(t, exec(m, cawCDB(0, 5, 1), cat(bad, old), 0), miscompareAt(300))
	checkSense(t, exec(m, cawCDB(0, 5, 2), make([]byte, 2048), 0), invalidCDB(13, -1))
	require.Equal(t, 2, st.calls)
	got := make([]byte, 512)
	require.NoError(t, mem.ReadAt(got, 5*512))
	require.Equal(t, next, got)

	mem4k, err := backstore.NewMemory(64*4096, 4096)
	require.NoError(t, err)
	lu, m = newLUOver(t, &cawStore{Backstore: mem4k, max: 512}, nil)
	require.Zero(t, lu.maxCompareAndWriteBlocks())
	checkSense(t, exec(m, cawCDB(0, 0, 1), make([]byte, 8192), 0), invalidCDB(13, -1))
}
