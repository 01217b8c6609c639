package srp

import "context"

// Test hooks for the external test package.

// WaitPoolsIdle waits until every data buffer of every device pool is back.
func (t *Target) WaitPoolsIdle(ctx context.Context) error { return t.waitIdle(ctx) }

// PoolsIdle reports whether every data buffer is back in its pool.
func (t *Target) PoolsIdle() bool { return t.poolsIdle() }

// SessionCount is the number of I_T nexuses the target remembers, with or without channels.
func (t *Target) SessionCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}
