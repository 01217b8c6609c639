//go:build rbd && cgo

package rbd

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testConn connects to the cluster of make test-rbd, or skips.
func testConn(t *testing.T) (*Conn, string) {
	t.Helper()
	conf, pool := os.Getenv("SRPT_RBD_CONF"), os.Getenv("SRPT_RBD_POOL")
	if conf == "" || pool == "" {
		t.Skip("no Ceph cluster: SRPT_RBD_CONF and SRPT_RBD_POOL are not set (make test-rbd starts one)")
	}
	c, err := Connect(Options{ConfFile: conf, MountTimeout: 10 * time.Second, OSDOpTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, pool
}

// testObject opens a fresh object name on c, removed at the end.
func testObject(t *testing.T, c *Conn, pool string) *Object {
	t.Helper()
	o, err := c.OpenObject(pool, "", fmt.Sprintf("srpt-test-%s-%d", t.Name(), time.Now().UnixNano()))
	require.NoError(t, err)
	t.Cleanup(o.Close)
	return o
}

// TestObjectOmap: a guarded update goes in whole or not at all, a missing key compares as the
// empty value, and a guarded read fails on a comparison.
func TestObjectOmap(t *testing.T) {
	c, pool := testConn(t)
	o := testObject(t, c, pool)
	_, err := o.ReadOmap([]string{"a"}, nil)
	require.ErrorIs(t, err, syscall.ENOENT, "no object yet")

	require.NoError(t, o.WriteOmap(OmapWrite{Create: true, Cmp: map[string][]byte{"version": nil}, Set: map[string][]byte{"version": []byte("1"), "state": []byte("one")}}))
	got, err := o.ReadOmap([]string{"version", "state", "missing"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"version": []byte("1"), "state": []byte("one")}, got)

	err = o.WriteOmap(OmapWrite{Cmp: map[string][]byte{"version": []byte("0")}, Set: map[string][]byte{"version": []byte("2"), "state": []byte("two")}})
	require.ErrorIs(t, err, ErrCompare)
	require.NoError(t, o.WriteOmap(OmapWrite{Cmp: map[string][]byte{"version": []byte("1")}, Set: map[string][]byte{"version": []byte("2"), "state": []byte("two")}, Remove: []string{"x"}}))
	got, err = o.ReadOmap([]string{"state"}, map[string][]byte{"version": []byte("2")})
	require.NoError(t, err)
	require.Equal(t, "two", string(got["state"]))
	_, err = o.ReadOmap([]string{"state"}, map[string][]byte{"version": []byte("1")})
	require.ErrorIs(t, err, ErrCompare)
	require.NoError(t, o.WriteOmap(OmapWrite{Set: map[string][]byte{"member.a": []byte("1"), "member.b": nil, "other": []byte("x")}}))
	got, err = o.ListOmap("member.", 100)
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"member.a": []byte("1"), "member.b": {}}, got)
	require.NoError(t, o.WriteOmap(OmapWrite{Remove: []string{"state", "member.a", "member.b", "other"}}))
	got, err = o.ReadOmap([]string{"state", "version"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string][]byte{"version": []byte("2")}, got)
}

// TestObjectWatchNotify: a watcher on another client gets the notify and its acknowledgement's
// payload reaches the notifier with the watcher's client id and cookie; a watcher that does not
// acknowledge is listed as timed out.
func TestObjectWatchNotify(t *testing.T) {
	c1, pool := testConn(t)
	c2, _ := testConn(t)
	o1 := testObject(t, c1, pool)
	require.NoError(t, o1.WriteOmap(OmapWrite{Create: true}))
	o2, err := c2.OpenObject(pool, "", o1.name[len(pool)+1:])
	require.NoError(t, err)
	defer o2.Close()

	got := make(chan Notification, 4)
	ack := true
	w, err := o2.Watch(0, func(n Notification) {
		got <- n
		if ack {
			require.NoError(t, o2.Ack(n, []byte("applied "+string(n.Data))))
		}
	}, func(err error) { t.Errorf("watch error: %v", err) })
	require.NoError(t, err)
	d, err := w.Check()
	require.NoError(t, err)
	t.Logf("watch confirmed %v ago", d)

	start := time.Now()
	r, err := o1.Notify([]byte("v7"), 5*time.Second)
	require.NoError(t, err)
	t.Logf("notify acknowledged in %v", time.Since(start))
	require.Equal(t, []NotifyAck{{GID: c2.InstanceID(), Cookie: w.Cookie(), Payload: []byte("applied v7")}}, r.Acks)
	require.Empty(t, r.Timeouts)
	n := <-got
	require.Equal(t, []byte("v7"), n.Data)
	require.Equal(t, c1.InstanceID(), n.Notifier)

	ack = false
	start = time.Now()
	r, err = o1.Notify([]byte("v8"), time.Second)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	require.Empty(t, r.Acks)
	require.Equal(t, []NotifyAck{{GID: c2.InstanceID(), Cookie: w.Cookie()}}, r.Timeouts)
	<-got
	require.NoError(t, w.Close())

	r, err = o1.Notify([]byte("v9"), time.Second)
	require.NoError(t, err)
	require.Empty(t, r.Acks)
	require.Empty(t, r.Timeouts, "no watcher left")
}

// TestCompareAndWriteLimits: what librbd's compare-and-write takes: one 512-byte sector, where
// a miscompare writes nothing and reports the first differing byte; EINVAL for more or across a
// sector boundary.
func TestCompareAndWriteLimits(t *testing.T) {
	c, pool := testConn(t)
	name := fmt.Sprintf("caw-%d", time.Now().UnixNano())
	require.NoError(t, c.CreateImage(pool, "", name, 16<<20))
	defer func() { require.NoError(t, c.RemoveImage(pool, "", name)) }()
	im, err := c.OpenImage(pool, "", name, false, 0)
	require.NoError(t, err)
	defer im.Close()
	fill := func(n int, b byte) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = b
		}
		return p
	}
	for _, tc := range []struct {
		off  int64
		n    int
		fits bool
	}{{0, 512, true}, {4<<20 - 512, 512, true}, {4096, 4096, false}, {8192, 1024, false}, {8192 + 256, 512, false}} {
		zero := make([]byte, tc.n)
		_, err := im.CompareAndWrite(zero, fill(tc.n, 1), tc.off)
		if !tc.fits {
			require.ErrorIs(t, err, syscall.EINVAL, "%d bytes at %d", tc.n, tc.off)
			continue
		}
		require.NoError(t, err)
		bad := fill(tc.n, 1)
		bad[tc.n-7] = 9
		mo, err := im.CompareAndWrite(bad, fill(tc.n, 2), tc.off)
		require.ErrorIs(t, err, ErrMiscompare)
		require.Equal(t, int64(tc.n-7), mo)
		got := make([]byte, tc.n)
		require.NoError(t, im.Read(got, tc.off))
		require.Equal(t, fill(tc.n, 1), got, "nothing written on a miscompare")
	}
}
