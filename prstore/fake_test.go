package prstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// fakeCluster is one RADOS object in memory, with the semantics the store relies on: omap
// operations applied whole or not at all, a missing key comparing as empty, and notifies that
// wait for every watcher's acknowledgement or a timeout.
type fakeCluster struct {
	mu       sync.Mutex
	exists   bool
	omap     map[string][]byte
	watchers map[uint64]*fakeWatch
	nextID   uint64
	acks     map[uint64]chan rbd.NotifyAck // by notify id
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{omap: map[string][]byte{}, watchers: map[uint64]*fakeWatch{}, acks: map[uint64]chan rbd.NotifyAck{}}
}

// fakeClient is one gateway's client; cut makes it unable to reach the cluster (every operation
// fails, notifies do not reach it).
type fakeClient struct {
	cl  *fakeCluster
	gid uint64
	cut atomic.Bool
}

type fakeWatch struct {
	c        *fakeClient
	cookie   uint64
	onNotify func(rbd.Notification)
}

var errCut = syscall.ETIMEDOUT

func (cl *fakeCluster) client(gid uint64) *fakeClient { return &fakeClient{cl: cl, gid: gid} }

func (c *fakeClient) ReadOmap(keys []string, cmp map[string][]byte) (map[string][]byte, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	if !c.cl.exists {
		return nil, syscall.ENOENT
	}
	for k, v := range cmp {
		if string(c.cl.omap[k]) != string(v) {
			return nil, rbd.ErrCompare
		}
	}
	out := map[string][]byte{}
	for _, k := range keys {
		if v, ok := c.cl.omap[k]; ok {
			out[k] = append([]byte(nil), v...)
		}
	}
	return out, nil
}

func (c *fakeClient) ListOmap(prefix string, max int) (map[string][]byte, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range c.cl.omap {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix && len(out) < max {
			out[k] = append([]byte(nil), v...)
		}
	}
	return out, nil
}

func (c *fakeClient) WriteOmap(w rbd.OmapWrite) error {
	if c.cut.Load() {
		return errCut
	}
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	if !c.cl.exists && !w.Create {
		return syscall.ENOENT
	}
	for k, v := range w.Cmp {
		if string(c.cl.omap[k]) != string(v) {
			return rbd.ErrCompare
		}
	}
	c.cl.exists = true
	for k, v := range w.Set {
		c.cl.omap[k] = append([]byte(nil), v...)
	}
	for _, k := range w.Remove {
		delete(c.cl.omap, k)
	}
	return nil
}

func (c *fakeClient) Watch(_ time.Duration, onNotify func(rbd.Notification), _ func(error)) (Watch, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	c.cl.nextID++
	w := &fakeWatch{c: c, cookie: c.cl.nextID, onNotify: onNotify}
	c.cl.watchers[w.cookie] = w
	return w, nil
}

func (w *fakeWatch) Close() error {
	w.c.cl.mu.Lock()
	defer w.c.cl.mu.Unlock()
	delete(w.c.cl.watchers, w.cookie)
	return nil
}

func (c *fakeClient) Ack(n rbd.Notification, payload []byte) error {
	if c.cut.Load() {
		return errCut
	}
	c.cl.mu.Lock()
	ch := c.cl.acks[n.ID]
	c.cl.mu.Unlock()
	if ch == nil {
		return errors.New("no such notify")
	}
	ch <- rbd.NotifyAck{GID: c.gid, Cookie: n.Cookie, Payload: append([]byte(nil), payload...)}
	return nil
}

func (c *fakeClient) Notify(data []byte, timeout time.Duration) (rbd.NotifyReply, error) {
	if c.cut.Load() {
		return rbd.NotifyReply{}, errCut
	}
	c.cl.mu.Lock()
	c.cl.nextID++
	id := c.cl.nextID
	var ws []*fakeWatch
	for _, w := range c.cl.watchers {
		ws = append(ws, w)
	}
	ch := make(chan rbd.NotifyAck, len(ws))
	c.cl.acks[id] = ch
	c.cl.mu.Unlock()
	defer func() {
		c.cl.mu.Lock()
		delete(c.cl.acks, id)
		c.cl.mu.Unlock()
	}()
	pending := map[uint64]*fakeWatch{}
	for _, w := range ws {
		pending[w.cookie] = w
		if !w.c.cut.Load() {
			go w.onNotify(rbd.Notification{ID: id, Cookie: w.cookie, Notifier: c.gid, Data: append([]byte(nil), data...)})
		}
	}
	var r rbd.NotifyReply
	deadline := time.After(timeout)
	for len(pending) > 0 {
		select {
		case a := <-ch:
			delete(pending, a.Cookie)
			r.Acks = append(r.Acks, a)
		case <-deadline:
			for _, w := range pending {
				r.Timeouts = append(r.Timeouts, rbd.NotifyAck{GID: w.c.gid, Cookie: w.cookie})
			}
			return r, nil
		}
	}
	return r, nil
}
