package memfabric

import "github.com/srptarget/srptarget/ib"

// A connection's end: Disconnect (DREQ/DREP), Close, Vanish (a peer that disappears without a
// word), and the device's removal.

// Disconnect implements ib.Conn.
func (c *Conn) Disconnect() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("disconnect"); err != nil {
		return err
	}
	c.enterError()
	c.sendDisconnect()
	c.p.wake()
	return nil
}

// sendDisconnect models DREQ/DREP: both ends get EventDisconnected once. The peer's QP is left
// alone: on a real fabric it stays in RTS until the peer calls Disconnect itself.
func (c *Conn) sendDisconnect() {
	if !c.discSent {
		c.discSent = true
		c.estPending = false
		c.pushEvent(ib.EventDisconnected)
	}
	if peer := c.peer(); peer != nil && !peer.closed && !peer.removed && !peer.discSent {
		peer.discSent = true
		peer.estPending = false
		peer.pushEvent(ib.EventDisconnected)
	}
}

// Close implements ib.Conn: a connected QP sends a DREQ first, as rdma_destroy_id does.
func (c *Conn) Close() error {
	c.closeConn(true)
	return nil
}

// Vanish makes this end disappear without a DREQ, as if its host crashed or its cable was
// pulled: the peer gets no event, and its work requests complete with
// StatusTransportRetryExceeded after Options.RetryTimeout. The Conn is closed afterwards.
func (c *Conn) Vanish() {
	c.closeConn(false)
}

func (c *Conn) closeConn(dreq bool) {
	p := c.p
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return
	}
	if dreq && !c.removed {
		c.enterError()
		c.sendDisconnect()
	}
	c.closed = true
	c.leaveShared()
	c.unblock()
	c.signal()
	if peer := c.peer(); peer != nil {
		peer.dirty = true
	}
	p.wake()
	stop := p.stopIfDead()
	p.mu.Unlock()
	c.node.forget(c)
	c.timerWG.Wait()
	if stop {
		p.wg.Wait()
	}
}

// deviceRemoved is Node.Remove's part for one connection.
func (c *Conn) deviceRemoved() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.closed || c.removed {
		return
	}
	c.removed = true
	c.unblock()
	c.pushEvent(ib.EventDeviceRemoved)
	if peer := c.peer(); peer != nil {
		peer.dirty = true
	}
	c.p.wake()
}
