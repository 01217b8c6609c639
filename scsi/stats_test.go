package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cdb  []byte
		want OpClass
	}{
		{"READ (6)", []byte{0x08, 0, 0, 0, 1, 0}, OpRead},
		{"READ (10)", []byte{0x28}, OpRead},
		{"READ (12)", []byte{0xA8}, OpRead},
		{"READ (16)", []byte{0x88}, OpRead},
		{"WRITE (6)", []byte{0x0A}, OpWrite},
		{"WRITE (10)", []byte{0x2A}, OpWrite},
		{"WRITE (12)", []byte{0xAA}, OpWrite},
		{"WRITE (16)", []byte{0x8A}, OpWrite},
		{"WRITE AND VERIFY (10)", []byte{0x2E}, OpWrite},
		{"WRITE AND VERIFY (16)", []byte{0x8E}, OpWrite},
		{"INQUIRY", []byte{0x12}, OpOther},
		{"VERIFY (10)", []byte{0x2F}, OpOther},
		{"WRITE SAME (16)", []byte{0x93}, OpOther},
		{"COMPARE AND WRITE", []byte{0x89}, OpOther},
		{"empty", nil, OpOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ClassOf(tc.cdb))
		})
	}
	require.Equal(t, []string{"read", "write", "other"}, []string{OpRead.String(), OpWrite.String(), OpOther.String()})
}

func TestSenseKeyString(t *testing.T) {
	for k, want := range map[SenseKey]string{
		SenseNotReady:       "NOT READY",
		SenseMediumError:    "MEDIUM ERROR",
		SenseIllegalRequest: "ILLEGAL REQUEST",
		SenseUnitAttention:  "UNIT ATTENTION",
		SenseDataProtect:    "DATA PROTECT",
		SenseAbortedCommand: "ABORTED COMMAND",
		SenseMiscompare:     "MISCOMPARE",
		0xC:                 "sense key 12",
	} {
		require.Equal(t, want, k.String())
	}
}

func TestHistogramBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ns     int64
		bucket int // index of the first bound that counts it; len(LatencyBounds): +Inf only
	}{
		{"negative", -5, 0},
		{"zero", 0, 0},
		{"on the first bound", 5e3, 0},
		{"just above it", 5e3 + 1, 1},
		{"1 ms", 1e6, 7},
		{"above the last bound", 11e9, len(LatencyBounds)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			h.Observe(tc.ns)
			s := h.Snapshot()
			require.Equal(t, uint64(1), s.Count)
			require.Equal(t, uint64(max(tc.ns, 0)), s.SumNanos)
			for i := range LatencyBounds {
				want := uint64(0)
				if i >= tc.bucket {
					want = 1
				}
				require.Equal(t, want, s.Buckets[i], "bucket %d (le %d ns)", i, LatencyBounds[i])
			}
		})
	}
}

func TestLUStatsComplete(t *testing.T) {
	for _, tc := range []struct {
		name       string
		descriptor bool
		status     Status
		reason     Reason
		wantKey    SenseKey
		counted    bool
	}{
		{"GOOD", false, StatusGood, ReasonNone, 0, false},
		{"MEDIUM ERROR, fixed", false, StatusCheckCondition, ReasonUnrecoveredReadError, SenseMediumError, true},
		{"ILLEGAL REQUEST, descriptor", true, StatusCheckCondition, ReasonInvalidCommandOperationCode, SenseIllegalRequest, true},
		{"BUSY, no sense", false, StatusBusy, ReasonNone, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lu := newTestLU(t, 16, 512, nil)
			s := lu.Stats()
			var c Command
			c.Status = tc.status
			if tc.reason != ReasonNone {
				c.SenseLength = BuildSense(c.Sense[:], tc.descriptor, tc.reason, SenseInfo{})
			}
			require.True(t, lu.Hold())
			require.Equal(t, int64(1), lu.StatsSnapshot().InFlight, "commands in flight are the holds")
			s.Complete(OpRead, &c, 4096, 0, 30e3)
			lu.Release()
			snap := lu.StatsSnapshot()
			require.Equal(t, int64(0), snap.InFlight)
			require.Equal(t, [NumOpClasses]uint64{1, 0, 0}, snap.Commands)
			require.Equal(t, uint64(1), snap.Latency[OpRead].Count)
			require.Equal(t, uint64(30e3), snap.Latency[OpRead].SumNanos)
			require.Equal(t, uint64(4096), snap.BytesIn)
			require.Zero(t, snap.BytesOut)
			var want [16]uint64
			if tc.counted {
				want[tc.wantKey] = 1
			}
			require.Equal(t, want, snap.SenseKeys)
		})
	}
}

func TestLUStatsCompleteAllocatesNothing(t *testing.T) {
	var s LUStats
	var c Command
	c.Status = StatusCheckCondition
	c.SenseLength = BuildSense(c.Sense[:], false, ReasonUnrecoveredReadError, SenseInfo{})
	allocs := testing.AllocsPerRun(100, func() {
		s.Complete(OpWrite, &c, 0, 512, 1e6)
	})
	require.Zero(t, allocs)
}

// BenchmarkLUStatsComplete is what the transport adds to each command's path: a GOOD read of
// 4 KiB, from one goroutine and from all at once on one logical unit (every channel of every
// initiator shares its counters).
func BenchmarkLUStatsComplete(b *testing.B) {
	var c Command
	b.Run("serial", func(b *testing.B) {
		var s LUStats
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Complete(OpRead, &c, 4096, 0, int64(i&0xFFFFF))
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var s LUStats
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var c Command
			i := 0
			for pb.Next() {
				s.Complete(OpRead, &c, 4096, 0, int64(i&0xFFFFF))
				i++
			}
		})
	})
}
