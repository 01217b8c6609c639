package srp

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

// devicePools are the data-buffer pools of the RDMA devices, one per protection domain: made
// and registered with the first channel on a device (or Target.Prepare), released when the
// device is removed and its channels have closed, or at Target.Shutdown.
type devicePools struct {
	lim *Limits
	log *zap.Logger

	mu       sync.Mutex
	pools    map[ib.ProtectionDomain]*bufPool
	retiring sync.WaitGroup // pools of removed devices waiting for their channels
}

// init readies d for New's target.
func (d *devicePools) init(lim *Limits, log *zap.Logger) {
	d.lim, d.log, d.pools = lim, log, make(map[ib.ProtectionDomain]*bufPool)
}

// get returns the buffer pool of pd, creating and registering it on first use.
func (d *devicePools) get(pd ib.ProtectionDomain) (*bufPool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.pools[pd]; p != nil {
		return p, nil
	}
	p, err := newBufPool(pd, d.lim.BufferPoolSize, d.lim.MaxTransferLen, d.lim.RemoteWriteForReadSinks)
	if err != nil {
		return nil, err
	}
	d.pools[pd] = p
	d.log.Info("registered data buffer pool", zap.Int64("bytes", p.size()), zap.Int64("largest_buffer", int64(poolMinBlock)<<p.blocks.maxOrder),
		zap.Bool("remote_write", d.lim.RemoteWriteForReadSinks))
	if rn, ok := pd.(ib.RemovalNotifier); ok {
		d.retiring.Add(1)
		go d.retire(pd, p, rn.Removed())
	}
	return p, nil
}

// retire releases the buffer pool of a device once the device is removed and the pool's
// channels have closed: otherwise every removal and re-add of a device (rdma link del/add)
// would leave a pool's memory mapped for the life of the process. A device added again gets
// a new protection domain, hence a new pool. close (Target.Shutdown) closes a pool that is
// still in the map; a retired one is closed here.
func (d *devicePools) retire(pd ib.ProtectionDomain, p *bufPool, removed <-chan struct{}) {
	defer d.retiring.Done()
	select {
	case <-removed:
	case <-p.closing:
		return // Shutdown closes it
	}
	d.mu.Lock()
	if d.pools[pd] != p {
		d.mu.Unlock()
		return // Shutdown took it
	}
	delete(d.pools, pd)
	d.mu.Unlock()
	d.log.Info("RDMA device removed: releasing its data buffer pool once its channels have closed", zap.Int64("bytes", p.size()))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !p.unused() {
		<-tick.C
	}
	if err := p.close(); err != nil {
		d.log.Warn("releasing the buffer pool of a removed device", zap.Error(err))
		return
	}
	d.log.Info("released the data buffer pool of a removed device", zap.Int64("bytes", p.size()))
}

// each calls fn for every pool, under the lock: for the statistics.
func (d *devicePools) each(fn func(*bufPool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pools {
		fn(p)
	}
}

// close releases every pool, and waits for those of removed devices (retire).
func (d *devicePools) close() {
	d.mu.Lock()
	pools := d.pools
	d.pools = make(map[ib.ProtectionDomain]*bufPool)
	d.mu.Unlock()
	for _, p := range pools {
		if err := p.close(); err != nil {
			d.log.Warn("releasing buffer pool", zap.Error(err))
		}
	}
	d.retiring.Wait()
}
