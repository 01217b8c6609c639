package srp_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/srptest"
)

// BenchmarkIdleChannelMemory reports what an idle channel costs: 64 channels, each of a
// session of its own, log in, run a few commands and sit idle. What each one adds is measured
// from a target that already has one idle channel, so that what the first channel on a device
// makes once (the data buffer pool, the poll group's shared receive queue and completion
// queues) is not spread over the 64; that is first-channel-RSS-bytes.
//
// RSS-bytes/channel and heap-bytes/channel are the whole process's: the engine's, the
// in-memory fabric's (whose simulated queue pairs and completion queues are, with a real
// device, the provider's and the HCA's) and the initiator's. The heap in use is split by who
// allocated it, the innermost frame of this module on the allocation's stack deciding:
// engine-heap-bytes/channel (srp, scsi, backstore: what the daemon holds),
// fabric-heap-bytes/channel (ib/memfabric), initiator-heap-bytes/channel (srp/srptest and
// this test). engine-registered-bytes/channel is the engine's channel memory outside the
// heap (the registered receive and send buffers, srp.Target.ChannelMemoryBytes).
func BenchmarkIdleChannelMemory(b *testing.B) {
	const n = 64
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1 // every allocation on record, for heapByOwner
	for range b.N {
		h := newHarness(b, harnessOpts{nullLUN: true, logLevel: zapcore.ErrorLevel,
			limits: srp.Limits{MaxChannelsTotal: 1024, MaxChannelsPerSource: 1024, MaxSessionsPerSource: 1024}})
		idleLogin := func(i int) *srptest.Channel {
			cfg := h.cfg()
			cfg.InitiatorPortID[14], cfg.InitiatorPortID[15] = byte(i>>8), byte(i)
			ch := h.login(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 6 { // the unit attention, then reads
				if _, err := ch.Read10(ctx, 0, 0, 8, testBlockSize); err != nil {
					b.Fatal(err)
				}
			}
			return ch
		}
		idle := func() {
			time.Sleep(50 * time.Millisecond) // the channels go idle
		}
		rss0 := residentBytes(b)
		chs := []*srptest.Channel{idleLogin(0)}
		idle()
		rss1, heap1, own1, reg1, gor1 := residentBytes(b), heapBytes(), heapByOwner(), h.tgt.ChannelMemoryBytes(), runtime.NumGoroutine()
		for i := 1; i <= n; i++ {
			chs = append(chs, idleLogin(i))
		}
		idle()
		rss2, heap2, own2, reg2, gor2 := residentBytes(b), heapBytes(), heapByOwner(), h.tgt.ChannelMemoryBytes(), runtime.NumGoroutine()
		per := func(a, b int64) float64 { return float64(b-a) / n }
		b.ReportMetric(float64(rss1-rss0), "first-channel-RSS-bytes")
		b.ReportMetric(per(rss1, rss2), "RSS-bytes/channel")
		b.ReportMetric(per(heap1, heap2), "heap-bytes/channel")
		for _, o := range []string{"engine", "fabric", "initiator"} {
			b.ReportMetric(per(own1[o], own2[o]), o+"-heap-bytes/channel")
		}
		b.ReportMetric(per(reg1, reg2), "engine-registered-bytes/channel")
		b.ReportMetric(per(int64(gor1), int64(gor2)), "goroutines/channel")
		for _, ch := range chs {
			_ = ch.Close()
		}
	}
}

// residentBytes is the process's resident memory (/proc/self/statm).
func residentBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(data))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// heapBytes is the heap and the goroutine stacks in use, after a collection.
func heapBytes() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// modulePath prefixes the functions of this module.
const modulePath = "github.com/srptarget/srptarget/"

// heapOwners name who allocated a heap object by the package of the innermost frame of this
// module on its stack; packages not named (ib's shared helpers) pass to the next frame.
var heapOwners = []struct{ prefix, owner string }{
	{modulePath + "ib/memfabric.", "fabric"},
	{modulePath + "srp/srptest.", "initiator"},
	{modulePath + "srp_test.", "initiator"},
	{modulePath + "internal/testutil", "initiator"},
	{modulePath + "srp.", "engine"},
	{modulePath + "srp/iu.", "engine"},
	{modulePath + "scsi.", "engine"},
	{modulePath + "backstore.", "engine"},
	{modulePath + "lib/", "engine"},
}

// heapByOwner sums the heap in use by owner (heapOwners; "other" for none). Every allocation
// is on record only while runtime.MemProfileRate is 1; the profile is as of the last
// collection but one, hence the two.
func heapByOwner() map[string]int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := map[string]int64{}
	for i := range recs {
		if inuse := recs[i].InUseBytes(); inuse != 0 {
			out[heapOwner(recs[i].Stack())] += inuse
		}
	}
	return out
}

func heapOwner(stk []uintptr) string {
	frames := runtime.CallersFrames(stk)
	for {
		f, more := frames.Next()
		for _, o := range heapOwners {
			if strings.HasPrefix(f.Function, o.prefix) {
				return o.owner
			}
		}
		if !more {
			return "other"
		}
	}
}
