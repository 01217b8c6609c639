package scsi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/srptarget/srptarget/backstore"
)

// The logical unit: its configuration and making, its attributes, its lifetime across a
// reload (Hold, Retire) and the unit attentions of its nexuses, whose table is nexusTable
// (nexus.go). How a command comes to run on it is in execute.go.

// Config describes one logical unit.
type Config struct {
	// Backstore holds the blocks. The logical unit takes ownership: Close closes it.
	Backstore backstore.Backstore
	// Vendor (8 bytes), Product (16) and Revision (4) are the standard INQUIRY identification,
	// ASCII, space padded. Multipath rules in the wild match vendor strings such as "LIO-ORG",
	// so any printable string is accepted.
	Vendor, Product, Revision string
	// Serial is the unit serial number (VPD page 0x80). Its hexadecimal digits also form the
	// vendor-specific part of the NAA-6 designator in VPD page 0x83, as LIO builds it.
	Serial string
	// ReadOnly write-protects the logical unit for every initiator.
	ReadOnly bool
	// WriteCache is the initial WCE bit of the caching mode page. With it off every write is
	// forced to stable storage before it completes.
	WriteCache bool
	// ThinProvisioning advertises logical block provisioning (LBPME, VPD page 0xB2, UNMAP and
	// WRITE SAME with UNMAP). It needs a backstore that can unmap.
	ThinProvisioning bool
	// NonRotational reports a medium rotation rate of 1 (solid state) in VPD page 0xB1.
	NonRotational bool
	// MaxTransferBytes is the largest data transfer of one command the transport accepts; it
	// becomes MAXIMUM TRANSFER LENGTH in VPD page 0xB0. Zero means no limit.
	MaxTransferBytes uint32
	// OptimalTransferBytes becomes OPTIMAL TRANSFER LENGTH in VPD page 0xB0; zero: not reported.
	OptimalTransferBytes uint32
	// PhysicalBlockSize is the physical block the logical unit reports: a power-of-two multiple
	// of the logical block size, at most 2^15 logical blocks (the four bits of LOGICAL BLOCKS
	// PER PHYSICAL BLOCK EXPONENT, SBC-4 5.20.2). Zero: the backstore's. A 512-byte logical
	// block with 4 KiB physical blocks is a 512e disk: the initiator aligns its I/O and its
	// discards to 4 KiB, and UNMAP deallocates whole physical blocks only (unmap.go).
	PhysicalBlockSize uint32
	// TaskManagement is the set of task management functions the transport can deliver, for
	// REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS. Zero: all the logical unit implements.
	TaskManagement TMFSet
	// Reservations holds the persistent and SPC-2 reservations. They belong to the logical
	// unit's identity rather than to this object: a caller that replaces the logical unit
	// hands the new one the same Reservations. Nil: new, empty, not persistable ones.
	Reservations *Reservations
}

// Defaults for the identification strings.
const (
	DefaultVendor   = "SRPTGT"
	DefaultProduct  = "srptarget disk"
	DefaultRevision = "0001"
)

func (cfg *Config) validate() error {
	if cfg.Backstore == nil {
		return errors.New("no backstore")
	}
	if cfg.Vendor == "" {
		cfg.Vendor = DefaultVendor
	}
	if cfg.Product == "" {
		cfg.Product = DefaultProduct
	}
	if cfg.Revision == "" {
		cfg.Revision = DefaultRevision
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"vendor", cfg.Vendor, 8}, {"product", cfg.Product, 16}, {"revision", cfg.Revision, 4}, {"serial", cfg.Serial, 252}} {
		if len(f.v) > f.max {
			return fmt.Errorf("%s %q is longer than %d bytes", f.name, f.v, f.max)
		}
		for _, r := range []byte(f.v) {
			if r < 0x20 || r > 0x7E {
				return fmt.Errorf("%s %q has a character that is not printable ASCII", f.name, f.v)
			}
		}
	}
	if cfg.Serial == "" {
		return errors.New("no unit serial number")
	}
	bs := cfg.Backstore.LogicalBlockSize()
	switch bs {
	case 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("logical block size %d is not one Linux accepts (512, 1024, 2048, 4096)", bs)
	}
	if cfg.PhysicalBlockSize == 0 {
		cfg.PhysicalBlockSize = cfg.Backstore.PhysicalBlockSize()
	}
	if pbs := cfg.PhysicalBlockSize; pbs < bs || pbs%bs != 0 || (pbs/bs)&(pbs/bs-1) != 0 || pbs/bs > maxBlocksPerPhysical {
		return fmt.Errorf("physical block size %d is not a power-of-two multiple of the logical block size %d, at most %d times it", pbs, bs, maxBlocksPerPhysical)
	}
	if cfg.Backstore.Size() < int64(bs) {
		return fmt.Errorf("capacity %d bytes is less than one block", cfg.Backstore.Size())
	}
	if cfg.ThinProvisioning && !cfg.Backstore.Capabilities().Unmap {
		return errors.New("thin provisioning needs a backstore that can unmap")
	}
	return nil
}

// LogicalUnit is one SCSI direct-access logical unit. It is safe for concurrent use: commands from
// many nexuses run on it at once.
type LogicalUnit struct {
	cfg Config
	bs  backstore.Backstore

	blockSize  uint32 // logical block size in bytes
	blockShift uint   // log2(blockSize)
	// physShift is log2 of the logical blocks per physical block (LOGICAL BLOCKS PER PHYSICAL
	// BLOCK EXPONENT); LBA 0 is the start of a physical block (LOWEST ALIGNED LOGICAL BLOCK
	// ADDRESS 0).
	physShift uint
	blocks    atomic.Uint64

	mode modeState

	pr *Reservations // persistent and SPC-2 reservations (pr.go)

	mu sync.Mutex // guards changes of nexuses and the task set
	// nexuses holds the state of each I_T nexus seen; its per-command lookup takes no lock.
	nexuses nexusTable
	tasks   taskSet

	ranges rangeLock // LBA ranges of writes in progress, for COMPARE AND WRITE (rangelock.go)

	sanitizing sanitizeState // the sanitize operation (sanitize.go)

	// atomicWriter makes WRITE ATOMIC(16)'s writes, within atomic (atomic.go); nil, and
	// atomic zero, when the backstore makes no atomic writes.
	atomicWriter backstore.AtomicWriter
	atomic       atomicLimits

	// naaDescriptor is the NAA designation descriptor of VPD page 0x83 (header and
	// designator), which EXTENDED COPY's CSCD descriptors name a logical unit by.
	naaDescriptor [20]byte
	copies        copyRegistry // EXTENDED COPY operations (copyresults.go)

	nonBlocking bool // the backstore never waits for I/O (backstore.NonBlocking)
	// async is the backstore when a backstore.Queue can drive it (async.go), else nil.
	async backstore.AsyncStore

	// Commands holding the logical unit (Hold), and its retirement (Retire): a reload that
	// removes or replaces it closes the backstore only once they are done.
	holds    atomic.Int64
	retiring atomic.Bool
	idleOnce sync.Once
	idle     chan struct{} // closed once retiring with no holds

	stats LUStats // kept by the transport (Stats)
}

// Stats returns the logical unit's command counters, which the transport updates as its
// commands end.
func (lu *LogicalUnit) Stats() *LUStats { return &lu.stats }

// StatsSnapshot reads the counters of Stats and the commands in flight, for a monitoring
// exporter.
func (lu *LogicalUnit) StatsSnapshot() LUStatsSnapshot {
	s := lu.stats.snapshot()
	s.InFlight = lu.Holds()
	return s
}

// NonBlocking reports whether the logical unit's backstore never waits for I/O (RAM, null):
// its commands take microseconds, and may run on a goroutine that must not block for long.
// They can still wait in the task set or for an LBA range, behind commands that are
// executing elsewhere.
func (lu *LogicalUnit) NonBlocking() bool { return lu.nonBlocking }

// NonBlockingFor reports whether the command with cdb may run where NonBlocking allows: the
// logical unit never waits for I/O and the command is not one that can wait long whatever the
// backstore (opMayBlock: EXTENDED COPY, SANITIZE).
func (lu *LogicalUnit) NonBlockingFor(cdb []byte) bool {
	if !lu.nonBlocking || len(cdb) == 0 {
		return lu.nonBlocking
	}
	op := lookupCommand(cdb)
	return op == nil || op.flags&opMayBlock == 0
}

// NewLogicalUnit makes a logical unit over cfg.Backstore.
func NewLogicalUnit(cfg Config) (*LogicalUnit, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("logical unit %q: %w", cfg.Serial, err)
	}
	lu := &LogicalUnit{
		cfg: cfg,
		bs:  cfg.Backstore,
	}
	lu.nexuses.init()
	lu.pr = cfg.Reservations
	if lu.pr == nil {
		lu.pr = NewReservations(nil)
	}
	lu.pr.attach(lu)
	lu.idle = make(chan struct{})
	if nb, ok := cfg.Backstore.(backstore.NonBlocking); ok {
		lu.nonBlocking = nb.NonBlocking()
	}
	lu.async, _ = cfg.Backstore.(backstore.AsyncStore)
	lu.blockSize = cfg.Backstore.LogicalBlockSize()
	for 1<<lu.blockShift < lu.blockSize {
		lu.blockShift++
	}
	for lu.blockSize<<lu.physShift < cfg.PhysicalBlockSize {
		lu.physShift++
	}
	lu.blocks.Store(uint64(cfg.Backstore.Size()) >> lu.blockShift)
	if aw, ok := cfg.Backstore.(backstore.AtomicWriter); ok {
		lu.atomic = atomicLimitsOf(aw.AtomicLimits(), lu.blockShift, cfg.MaxTransferBytes)
		if lu.atomic.max != 0 {
			lu.atomicWriter = aw
		}
	}
	lu.naaDescriptor = [20]byte{codeSetBinary, assocLU | designatorNAA, 0, 16}
	naaRegisteredExtended(lu.naaDescriptor[4:], cfg.Serial)
	lu.mode.init(cfg)
	lu.tasks.init(&lu.mu)
	return lu, nil
}

// Reservations returns the logical unit's reservations.
func (lu *LogicalUnit) Reservations() *Reservations { return lu.pr }

// Config returns the configuration the logical unit was made with.
func (lu *LogicalUnit) Config() Config { return lu.cfg }

// BlockSize is the logical block size in bytes.
func (lu *LogicalUnit) BlockSize() uint32 { return lu.blockSize }

// maxBlocksPerPhysical is the most logical blocks per physical block READ CAPACITY(16) can
// report: LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT has four bits.
const maxBlocksPerPhysical = 1 << 15

// PhysicalBlockSize is the physical block size in bytes the logical unit reports.
func (lu *LogicalUnit) PhysicalBlockSize() uint32 { return lu.blockSize << lu.physShift }

// blocksPerPhysical is the number of logical blocks in a physical block.
func (lu *LogicalUnit) blocksPerPhysical() uint64 { return 1 << lu.physShift }

// Blocks is the capacity in logical blocks.
func (lu *LogicalUnit) Blocks() uint64 { return lu.blocks.Load() }

// Close closes the backstore. Commands must no longer be submitted.
func (lu *LogicalUnit) Close() error { return lu.bs.Close() }

// Hold counts a command that is going to run on the logical unit, from the moment its LUN is
// looked up (before its data-out transfer) until Release. It fails once Retire has begun: the
// caller's LUN map is out of date and the command must look its LUN up in the current one.
func (lu *LogicalUnit) Hold() bool {
	lu.holds.Add(1)
	if lu.retiring.Load() {
		lu.Release()
		return false
	}
	return true
}

// Release ends a successful Hold.
func (lu *LogicalUnit) Release() {
	if lu.holds.Add(-1) == 0 && lu.retiring.Load() {
		lu.idleOnce.Do(func() { close(lu.idle) })
	}
}

// Holds reports how many commands hold the logical unit.
func (lu *LogicalUnit) Holds() int64 { return lu.holds.Load() }

// Retire takes the logical unit out of service once no LUN map hands it out any more (a
// reload removed or replaced it): later Holds fail, the commands that hold it run to the end,
// and then the backstore is closed. If ctx ends first the backstore is closed anyway (drained is
// false): of the commands still holding it, those that reach the backstore afterwards fail
// with LOGICAL UNIT COMMUNICATION FAILURE.
// Closing at once instead would fail every command that was still moving its data, and a
// write failed that way reaches the application as an I/O error.
func (lu *LogicalUnit) Retire(ctx context.Context) (drained bool, err error) {
	lu.retiring.Store(true)
	if lu.holds.Load() == 0 {
		lu.idleOnce.Do(func() { close(lu.idle) })
	}
	select {
	case <-lu.idle:
		drained = true
	case <-ctx.Done():
	}
	return drained, lu.Close()
}

// RefreshCapacity re-reads the backstore's size. When it changed, every nexus gets the unit
// attention CAPACITY DATA HAS CHANGED and changed is true.
func (lu *LogicalUnit) RefreshCapacity() (changed bool, err error) {
	size, err := lu.bs.Refresh()
	if err != nil {
		return false, fmt.Errorf("logical unit %q: refresh capacity: %w", lu.cfg.Serial, err)
	}
	blocks := uint64(size) >> lu.blockShift
	if lu.blocks.Swap(blocks) == blocks {
		return false, nil
	}
	lu.EstablishUA(nil, ReasonCapacityDataHasChanged)
	return true, nil
}

// descriptorSense reports whether sense data is in descriptor format (control mode page D_SENSE).
func (lu *LogicalUnit) descriptorSense() bool { return lu.mode.dSense.Load() }

// writeCacheEnabled reports the caching mode page's WCE bit.
func (lu *LogicalUnit) writeCacheEnabled() bool { return lu.mode.wce.Load() }

// WriteCacheEnabled reports the caching mode page's WCE bit now: an initiator may have changed
// the configured value with MODE SELECT (SBC-3 6.4.6), and operators want the current one.
func (lu *LogicalUnit) WriteCacheEnabled() bool { return lu.writeCacheEnabled() }

// nexus returns the state of nexus n, creating it (with the unit attention POWER ON, RESET, OR
// BUS DEVICE RESET OCCURRED pending) on first access.
func (lu *LogicalUnit) nexus(n *Nexus) *nexusState {
	// The first nexus, which answers every command of a unit one initiator uses, is checked
	// here rather than through lookup: a call per command less (lookup is over the inliner's
	// budget).
	if first := lu.nexuses.first.Load(); first != nil && first.n == n {
		return first
	}
	if s := lu.nexuses.lookup(n); s != nil {
		return s
	}
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.nexuses.getLocked(n)
}

// EstablishUA makes reason a pending unit attention for nexus n, or for every nexus the logical
// unit knows when n is nil. A nexus seen for the first time later gets POWER ON, RESET, OR BUS
// DEVICE RESET OCCURRED instead, which covers every other condition.
func (lu *LogicalUnit) EstablishUA(n *Nexus, reason Reason) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.nexuses.establishUALocked(n, nil, reason)
}

// takeUA removes and returns the unit attention to report to nexus n, or ReasonNone. It takes
// no lock when the nexus is known.
func (lu *LogicalUnit) takeUA(n *Nexus) Reason { return lu.nexus(n).ua.take() }

// clearUA drops a pending unit attention of nexus n without reporting it (REPORT LUNS clears
// REPORTED LUNS DATA HAS CHANGED).
func (lu *LogicalUnit) clearUA(n *Nexus, reason Reason) { lu.nexus(n).ua.remove(reason) }

// PendingUA reports the unit attention nexus n would see next, without clearing it.
func (lu *LogicalUnit) PendingUA(n *Nexus) Reason { return lu.nexus(n).ua.peek() }
