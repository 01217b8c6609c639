package checks

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// a SIGQUIT traceback (GOTRACEBACK=all) in Go's format, cut short
const dump = `SIGQUIT: quit
PC=0x47a3e1 m=0 sigcode=0

goroutine 0 gp=0x9a1e00 m=0 mp=0x9a2b20 [idle]:
runtime.futex(0x9a2c60, 0x80, 0x0, 0x0, 0x0, 0x0)
	/usr/local/go/src/runtime/sys_linux_amd64.s:557 +0x21 fp=0x7ffd8f0 sp=0x7ffd8e8 pc=0x47a3e1

goroutine 1 gp=0xc000002380 m=nil [select, 2 minutes]:
main.serve(0xc0001a2000)
	/src/cmd/srptarget/serve.go:139 +0x5e5

goroutine 7 gp=0xc0000a6a80 m=nil [chan receive]:
github.com/srptarget/srptarget/srp.(*Target).accept(0xc0001b0000)
	/src/srp/target.go:201 +0x65
created by github.com/srptarget/srptarget/srp.NewTarget in goroutine 1
	/src/srp/target.go:120 +0x3c5

goroutine 8 gp=0xc0000a6c40 m=nil [chan receive]:
github.com/srptarget/srptarget/srp.(*Target).accept(0xc0001b0000)
	/src/srp/target.go:201 +0x65
created by github.com/srptarget/srptarget/srp.NewTarget in goroutine 1
	/src/srp/target.go:120 +0x3c5

goroutine 3 gp=0xc000003180 m=nil [GC worker (idle)]:
runtime.gcBgMarkWorker(0xc0000200e0)
	/usr/local/go/src/runtime/mgc.go:1310 +0xe5
created by runtime.gcBgMarkStartWorkers in goroutine 1
	/usr/local/go/src/runtime/mgc.go:1226 +0x1c
`

func TestGoroutineCreators(t *testing.T) {
	n := GoroutineCreators(strings.Split(dump, "\n"))
	require.Equal(t, map[string]int{"(main)": 1, "github.com/srptarget/srptarget/srp.NewTarget": 2}, n)
	require.Equal(t, 3, Sum(n))
	require.Equal(t, "(main) 1->0, github.com/srptarget/srptarget/srp.NewTarget 2->3",
		CreatorsDiff(n, map[string]int{"github.com/srptarget/srptarget/srp.NewTarget": 3}))
	require.Empty(t, GoroutineCreators([]string{"2026-12-06 19:42:40.477\tINFO\tlogin accepted\t{}"}))
}

func TestCrashes(t *testing.T) {
	require.Empty(t, Crashes(strings.Split(dump, "\n")), "a dump asked for with SIGQUIT is no crash")
	got := Crashes([]string{"x\tINFO\tlogin accepted\t{}", "panic: runtime error: index out of range", "x\tFATAL\tcannot serve\t{}"})
	require.Equal(t, []string{"2:panic: runtime error: index out of range", "3:x\tFATAL\tcannot serve\t{}"}, got)
}

func TestBoundsAndResources(t *testing.T) {
	b := Bounds{Threads: 4, RSSKiB: 32 << 10}
	before := Resources{Threads: 10, FDs: 20, RSSKiB: 100 << 10}
	ok, _ := b.Within(before, Resources{Threads: 14, FDs: 20, RSSKiB: 132 << 10}, 0)
	require.True(t, ok)
	ok, _ = b.Within(before, Resources{Threads: 10, FDs: 21, RSSKiB: 100 << 10}, 0)
	require.False(t, ok, "one open file more")
	ok, _ = b.Within(before, Resources{Threads: 15, FDs: 20, RSSKiB: 100 << 10}, 0)
	require.False(t, ok)
	ok, detail := b.Within(before, Resources{Threads: 15, FDs: 20, RSSKiB: 100 << 10}, 12)
	require.True(t, ok, "the peak while it ran raises the threads' base")
	require.Contains(t, detail, "threads 10->15 (bound 12+4)")

	r := ResourcesOf(os.Getpid())
	require.Positive(t, r.Threads)
	require.Positive(t, r.FDs)
	require.Positive(t, r.RSSKiB)
	require.NotEmpty(t, FDKinds(os.Getpid()))
	require.Zero(t, ResourcesOf(1<<30).Threads, "no such process")
}
