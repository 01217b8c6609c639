package checks

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
)

// Pattern is random data written to a region of a disk (O_DIRECT, past the page cache), kept
// as its checksum to compare with what the disk reads back later.
type Pattern struct {
	Dev         string
	OffMiB, MiB int
	file        string
	sum         [sha256.Size]byte
}

var patterns atomic.Int32

// NewPattern makes mib MiB of random data in a file of /tmp (dd writes it from there).
func NewPattern(mib int) (*Pattern, error) {
	data := make([]byte, mib<<20)
	if _, err := rand.Read(data); err != nil {
		return nil, err
	}
	p := &Pattern{MiB: mib, sum: sha256.Sum256(data), file: fmt.Sprintf("/tmp/pattern-%d", patterns.Add(1))}
	return p, os.WriteFile(p.file, data, 0o644)
}

// Cmd is the dd that writes the pattern to dev at offMiB MiB, to be run by the caller (in the
// background, for a write that waits for a target).
func (p *Pattern) Cmd(dev string, offMiB int) *exec.Cmd {
	p.Dev, p.OffMiB = dev, offMiB
	return exec.Command("dd", "if="+p.file, "of="+dev, "bs=1M", "seek="+strconv.Itoa(offMiB),
		"count="+strconv.Itoa(p.MiB), "oflag=direct", "conv=notrunc", "status=none")
}

// WritePattern writes mib MiB of random data to dev at offMiB MiB.
func WritePattern(dev string, offMiB, mib int) (*Pattern, error) {
	p, err := NewPattern(mib)
	if err != nil {
		return nil, err
	}
	if out, err := p.Cmd(dev, offMiB).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dd to %s: %v: %s", dev, err, out)
	}
	return p, nil
}

// Same reads the region back (from dev, which may be another name of the same LUN after a new
// login) and compares it.
func (p *Pattern) Same(dev string) error {
	got, err := exec.Command("dd", "if="+dev, "bs=1M", "skip="+strconv.Itoa(p.OffMiB), "count="+strconv.Itoa(p.MiB),
		"iflag=direct", "status=none").Output()
	if err != nil {
		return fmt.Errorf("dd from %s: %w", dev, err)
	}
	if s := sha256.Sum256(got); s != p.sum {
		return fmt.Errorf("%s at %d MiB: sha256 %x, want %x (%d of %d bytes read)", dev, p.OffMiB, s[:8], p.sum[:8], len(got), p.MiB<<20)
	}
	return nil
}
