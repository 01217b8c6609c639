package scsi

import (
	"strconv"
	"sync/atomic"
)

// OpClass groups commands for statistics: the reads and writes of user data, and the rest
// (INQUIRY, TEST UNIT READY, SYNCHRONIZE CACHE, UNMAP, ...), whose latency would otherwise
// blur the data path's.
type OpClass uint8

// Operation classes.
const (
	OpRead  OpClass = iota // READ (6), (10), (12), (16)
	OpWrite                // WRITE (6), (10), (12), (16); WRITE AND VERIFY (10), (12), (16); WRITE ATOMIC(16)
	OpOther                // everything else, and CDBs too short to name a command
	NumOpClasses
)

// String returns the label value used for the class: "read", "write" or "other".
func (k OpClass) String() string {
	switch k {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return "other"
}

// ClassOf classifies a CDB by its operation code (SBC-3 table 13). VERIFY, WRITE SAME,
// COMPARE AND WRITE and UNMAP are "other": they move no data, or not the data they touch on
// the medium, so counting them as reads or writes would skew both the byte rates and the
// latency of the data path.
func ClassOf(cdb []byte) OpClass {
	if len(cdb) == 0 {
		return OpOther
	}
	switch cdb[0] {
	case 0x08, 0x28, 0xA8, 0x88: // READ (6), (10), (12), (16)
		return OpRead
	case 0x0A, 0x2A, 0xAA, 0x8A, // WRITE (6), (10), (12), (16)
		0x2E, 0xAE, 0x8E, // WRITE AND VERIFY (10), (12), (16)
		opWriteAtomic16:
		return OpWrite
	}
	return OpOther
}

// String returns the SPC-4 name of the sense key (SPC-4 table 28), e.g. "MEDIUM ERROR".
func (k SenseKey) String() string {
	switch k {
	case SenseNoSense:
		return "NO SENSE"
	case SenseRecoveredError:
		return "RECOVERED ERROR"
	case SenseNotReady:
		return "NOT READY"
	case SenseMediumError:
		return "MEDIUM ERROR"
	case SenseHardwareError:
		return "HARDWARE ERROR"
	case SenseIllegalRequest:
		return "ILLEGAL REQUEST"
	case SenseUnitAttention:
		return "UNIT ATTENTION"
	case SenseDataProtect:
		return "DATA PROTECT"
	case SenseBlankCheck:
		return "BLANK CHECK"
	case 0x9:
		return "VENDOR SPECIFIC"
	case SenseCopyAborted:
		return "COPY ABORTED"
	case SenseAbortedCommand:
		return "ABORTED COMMAND"
	case SenseVolumeOverflow:
		return "VOLUME OVERFLOW"
	case SenseMiscompare:
		return "MISCOMPARE"
	case 0xF:
		return "COMPLETED"
	}
	return "sense key " + strconv.Itoa(int(k))
}

// senseKeyOf returns the sense key of fixed or descriptor format sense data (SPC-4 4.5.2.1,
// 4.5.3.1) without decoding the rest, so that counting it costs a few loads per command.
func senseKeyOf(b []byte) (SenseKey, bool) {
	if len(b) < 3 {
		return 0, false
	}
	switch b[0] & 0x7F {
	case SenseCurrentFixed, SenseDeferredFixed:
		return SenseKey(b[2] & 0x0F), true
	case SenseCurrentDescriptor, SenseDeferredDescriptor:
		return SenseKey(b[1] & 0x0F), true
	}
	return 0, false
}

// LatencyBounds are the upper bounds, in nanoseconds, of the buckets of the latency
// histograms, from 5 µs (a RAM logical unit on real RDMA hardware) to 10 s (a backstore
// retrying a failing disk). A last bucket counts what exceeds them. The bounds are fixed so
// that observing is a short loop and an atomic add, with nothing to allocate or lock.
var LatencyBounds = [...]int64{
	5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3,
	1e6, 2.5e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6,
	1e9, 2.5e9, 5e9, 10e9,
}

// Histogram is a latency histogram with the fixed buckets LatencyBounds, safe for concurrent
// use. The zero value is empty.
type Histogram struct {
	buckets [len(LatencyBounds) + 1]atomic.Uint64 // not cumulative; the last one is +Inf
	sum     atomic.Uint64                         // nanoseconds
}

// Observe counts one latency of ns nanoseconds (negative counts as 0).
func (h *Histogram) Observe(ns int64) {
	ns = max(ns, 0)
	i := 0
	for i < len(LatencyBounds) && ns > LatencyBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	if ns > 0 { // 0 when the transport does not measure latency
		h.sum.Add(uint64(ns))
	}
}

// HistogramSnapshot is a histogram read at one time. Buckets[i] counts the observations of
// at most LatencyBounds[i] (cumulative, as Prometheus wants them); Count includes those above
// the last bound.
type HistogramSnapshot struct {
	Buckets  [len(LatencyBounds)]uint64
	Count    uint64
	SumNanos uint64
}

// Snapshot reads h. Observations made meanwhile may be partly included; Count is the sum of
// the buckets read, so that the snapshot is consistent in itself.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	var cum uint64
	for i := range LatencyBounds {
		cum += h.buckets[i].Load()
		s.Buckets[i] = cum
	}
	s.Count = cum + h.buckets[len(LatencyBounds)].Load()
	s.SumNanos = h.sum.Load()
	return s
}

// LUStats are the counters of one logical unit, kept by the transport as its commands end
// (the transport measures latency: the command's life begins with its arrival and ends when
// the response has been delivered, which this package never sees). They live in the
// LogicalUnit, which every session that maps it shares, so that a monitoring system sees one
// series per logical unit whichever initiators use it, and a reload that keeps the unit
// keeps its counters.
//
// A command costs three atomic adds at most (a latency bucket, the latency sum, the bytes),
// four with a CHECK CONDITION: every channel of every initiator that uses the logical unit
// adds to the same cache lines, so nothing is counted twice. The number of commands of a
// class is its histogram's count, and the commands in flight are the logical unit's holds
// (LogicalUnit.Hold), which the transport takes anyway.
type LUStats struct {
	latency   [NumOpClasses]Histogram
	bytesIn   atomic.Uint64 // data-in: sent to the initiator
	bytesOut  atomic.Uint64 // data-out: received from the initiator
	senseKeys [16]atomic.Uint64
}

// Complete counts a command whose response was delivered: its class, the data it moved each
// way, the sense key of a CHECK CONDITION, and its latency in nanoseconds.
func (s *LUStats) Complete(class OpClass, c *Command, dataIn, dataOut uint64, latencyNanos int64) {
	if class >= NumOpClasses {
		class = OpOther
	}
	s.latency[class].Observe(latencyNanos)
	if dataIn > 0 {
		s.bytesIn.Add(dataIn)
	}
	if dataOut > 0 {
		s.bytesOut.Add(dataOut)
	}
	if c.Status == StatusCheckCondition {
		if k, ok := senseKeyOf(c.Sense[:min(c.SenseLength, len(c.Sense))]); ok {
			s.senseKeys[k].Add(1)
		}
	}
}

// LUStatsSnapshot is LUStats read at one time, for exporting.
type LUStatsSnapshot struct {
	Commands [NumOpClasses]uint64
	Latency  [NumOpClasses]HistogramSnapshot
	// BytesIn is data-in (sent to the initiator: reads), BytesOut data-out (received: writes).
	BytesIn, BytesOut uint64
	// SenseKeys counts CHECK CONDITION responses by sense key (index: the SenseKey).
	SenseKeys [16]uint64
	// InFlight is the number of commands holding the logical unit (LogicalUnit.Holds): those
	// that arrived and are not over.
	InFlight int64
}

// snapshot reads the counters.
func (s *LUStats) snapshot() LUStatsSnapshot {
	var out LUStatsSnapshot
	for i := range s.latency {
		out.Latency[i] = s.latency[i].Snapshot()
		out.Commands[i] = out.Latency[i].Count
	}
	out.BytesIn, out.BytesOut = s.bytesIn.Load(), s.bytesOut.Load()
	for i := range s.senseKeys {
		out.SenseKeys[i] = s.senseKeys[i].Load()
	}
	return out
}
