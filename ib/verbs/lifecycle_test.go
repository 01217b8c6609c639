//go:build linux && cgo

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// TestConnPhases: the moves the phase table allows, what each phase means to the data path,
// and that any other move panics.
func TestConnPhases(t *testing.T) {
	for _, path := range [][]connPhase{
		{connOpen, connDisconnecting, connClosed},
		{connOpen, connClosed},
		{connOpen, connRemoved, connRemovedClosed},
		{connOpen, connDisconnecting, connRemoved, connRemovedClosed},
	} {
		c := &Conn{}
		for _, p := range path[1:] {
			c.setPhase(p)
		}
		require.Equal(t, path[len(path)-1], c.phase)
	}
	for _, tc := range []struct {
		p                         connPhase
		released, closed, removed bool
		err                       error
	}{
		{connOpen, false, false, false, nil},
		{connDisconnecting, false, false, false, nil},
		{connRemoved, true, false, true, ib.ErrDeviceRemoved},
		{connClosed, true, true, false, ib.ErrClosed},
		{connRemovedClosed, true, true, true, ib.ErrClosed},
	} {
		c := &Conn{phase: tc.p}
		require.Equal(t, []bool{tc.released, tc.closed, tc.removed}, []bool{tc.p.released(), tc.p.closed(), tc.p.removed()}, "%v", tc.p)
		if tc.err == nil {
			require.NoError(t, c.usableLocked("post"), "%v", tc.p)
		} else {
			require.ErrorIs(t, c.usableLocked("post"), tc.err, "%v", tc.p)
		}
	}
	for _, bad := range [][2]connPhase{{connClosed, connOpen}, {connRemoved, connClosed}, {connDisconnecting, connOpen}, {connClosed, connRemoved}} {
		c := &Conn{phase: bad[0]}
		require.Panics(t, func() { c.setPhase(bad[1]) }, "%v -> %v", bad[0], bad[1])
	}
}

// TestEventPhases: each event is queued at most once, none before another that precedes it,
// and none after EventDeviceRemoved.
func TestEventPhases(t *testing.T) {
	for _, tc := range []struct {
		in   []eventPhase
		want []ib.Event
	}{
		{[]eventPhase{evEstablished, evEstablished, evDisconnected, evDisconnected, evRemoved},
			[]ib.Event{ib.EventEstablished, ib.EventDisconnected, ib.EventDeviceRemoved}},
		{[]eventPhase{evDisconnected, evEstablished}, []ib.Event{ib.EventDisconnected}},
		{[]eventPhase{evRemoved, evDisconnected, evEstablished}, []ib.Event{ib.EventDeviceRemoved}},
	} {
		c := &Conn{ready: make(chan struct{}, 1)}
		for _, e := range tc.in {
			c.queueEvent(e)
		}
		var got []ib.Event
		for {
			e, ok := c.PollEvent()
			if !ok {
				break
			}
			got = append(got, e)
		}
		require.Equal(t, tc.want, got, "%v", tc.in)
	}
}
