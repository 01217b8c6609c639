package backstore

import "fmt"

// Memory's capacity and its end: a new chunk table is published with every stripe lock held.

// Refresh returns the current capacity: Resize is the only way it changes.
func (m *Memory) Refresh() (int64, error) {
	t := m.table.Load()
	if t.closed {
		return 0, fmt.Errorf("backstore memory: refresh: %w", ErrClosed)
	}
	return t.size, nil
}

// Resize changes the capacity, as growing a volume outside the daemon would; the SCSI layer
// notices on its next Refresh. Data below the new size is kept; space added later reads as
// zeroes, also where it had been cut off by an earlier shrink.
func (m *Memory) Resize(newSize int64) error {
	if err := checkMemSize(newSize, m.lbs); err != nil {
		return err
	}
	return m.replaceTable(func(old *memTable) *memTable {
		t := newMemTable(newSize)
		// The levels below the top are shared with the old table: every stripe lock is held.
		for i := range min(len(t.top), len(old.top)) {
			t.top[i].Store(old.top[i].Load())
		}
		m.dropChunks(old, memChunkCount(newSize))
		if tail := newSize & (memChunkSize - 1); tail != 0 && newSize < old.size {
			if c := t.chunk(memChunkCount(newSize) - 1); c != nil {
				clear(c[tail:])
			}
		}
		return t
	})
}

// dropChunks frees the chunks of t from index from on, so that space a later Resize adds back
// reads as zeroes. It visits only the levels that exist; every stripe lock is held.
func (m *Memory) dropChunks(t *memTable, from int64) {
	for ti := from >> memTopShift; ti < int64(len(t.top)); ti++ {
		mid := t.top[ti].Load()
		if mid == nil {
			continue
		}
		for mi := range mid {
			leaf := mid[mi].Load()
			if leaf == nil {
				continue
			}
			base := ti<<memTopShift | int64(mi)<<memLeafBits
			for li := range leaf {
				if base+int64(li) >= from && leaf[li] != nil {
					leaf[li] = nil
					m.allocated.Add(-memChunkSize)
				}
			}
		}
	}
}

// Close drops the data; every later call fails with ErrClosed.
func (m *Memory) Close() error {
	return m.replaceTable(func(old *memTable) *memTable {
		m.allocated.Store(0)
		return &memTable{size: old.size, closed: true}
	})
}

// replaceTable publishes the table that next makes from the current one, holding every
// stripe lock so that no transfer is half way through a chunk.
func (m *Memory) replaceTable(next func(old *memTable) *memTable) error {
	m.resizeMu.Lock()
	defer m.resizeMu.Unlock()
	old := m.table.Load()
	if old.closed {
		return fmt.Errorf("backstore memory: %w", ErrClosed)
	}
	for i := range m.stripes {
		m.stripes[i].Lock()
	}
	m.table.Store(next(old))
	for i := range m.stripes {
		m.stripes[i].Unlock()
	}
	return nil
}
