// Command mmswitch measures what an address-space switch costs on the machine it runs on:
// the round trip of one byte between two threads of one process (a context switch that
// keeps the page tables) against the same between two processes (each switch loads other
// page tables), both ends pinned to CPU 0 so that every hand-off is a context switch, each
// end touching -pages pages of its own memory per hand-off.
//
// Under qemu's TCG every page-table switch empties the vCPU's software TLB (qemu64 has no
// PCID), so a process switch costs far more there than on hardware. A user-space SRP target
// sharing the VM's vCPUs with fio pays it on every hand-off between the two; LIO, running in
// kernel threads that borrow the current page tables, does not. integration/vm/schedtrace.sh
// runs it in the VM (bench/results/notebook-2026-12.md, "Where srptarget is slower").
//
//	mmswitch [-n 20000] [-pages 0,32,128]
//
// Output, one line per measurement:
//
//	MMSWITCH pages=N mode=threads|processes round_trip_us=F
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if isChild(os.Args) {
		fatal(childMain(os.Args))
		return
	}
	n := flag.Int("n", 20000, "round trips per measurement")
	pageList := flag.String("pages", "0,32,128", "pages each end touches per hand-off, comma separated")
	flag.Parse()
	for _, p := range strings.Split(*pageList, ",") {
		pages, err := strconv.Atoi(p)
		if err != nil || pages < 0 {
			fatal(fmt.Errorf("-pages: %q is not a page count", p))
		}
		for _, mode := range []string{"threads", "processes"} {
			rt, err := measure(mode, *n, pages)
			fatal(err)
			fmt.Printf("MMSWITCH pages=%d mode=%s round_trip_us=%.1f\n", pages, mode, rt.Seconds()*1e6/float64(*n))
		}
	}
}

// isChild reports whether args are those measure gives the re-executed binary.
func isChild(args []string) bool { return len(args) == 4 && args[1] == "-child" }

// childMain is the echo end in the process measure starts: "-child N PAGES", the pipe ends
// as fds 3 (read) and 4 (write).
func childMain(args []string) error {
	n, err1 := strconv.Atoi(args[2])
	pages, err2 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("child: bad arguments %q", args[2:])
	}
	return echo(3, 4, n, pages)
}

func fatal(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmswitch:", err)
		os.Exit(1)
	}
}

// pinToCPU0 binds the calling thread to CPU 0.
func pinToCPU0() error {
	var s unix.CPUSet
	s.Set(0)
	return unix.SchedSetaffinity(0, &s)
}

// touch writes one byte in each of the first pages pages of buf.
func touch(buf []byte, pages int) {
	for i := 0; i < pages; i++ {
		buf[i*4096]++
	}
}

// echo is the far end on its own pinned thread: it says it is ready, then n times reads a
// byte, touches its pages and writes the byte back.
func echo(r, w, n, pages int) error {
	runtime.LockOSThread()
	if err := pinToCPU0(); err != nil {
		return err
	}
	buf := make([]byte, (pages+1)*4096)
	b := []byte{0}
	if _, err := syscall.Write(w, b); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := syscall.Read(r, b); err != nil {
			return err
		}
		touch(buf, pages)
		if _, err := syscall.Write(w, b); err != nil {
			return err
		}
	}
	return nil
}

// measure runs n round trips against an echo end in another thread or another process and
// returns their total time, from the echo end's first ready byte on.
func measure(mode string, n, pages int) (time.Duration, error) {
	// Blocking pipes from syscall.Pipe, not os.Pipe: a read must block the thread in the
	// kernel (a context switch), not park a goroutine in the netpoller.
	var toEcho, fromEcho [2]int
	if err := syscall.Pipe(toEcho[:]); err != nil {
		return 0, err
	}
	if err := syscall.Pipe(fromEcho[:]); err != nil {
		return 0, err
	}
	defer func() {
		for _, fd := range []int{toEcho[0], toEcho[1], fromEcho[0], fromEcho[1]} {
			syscall.Close(fd)
		}
	}()
	echoDone := make(chan error, 1)
	switch mode {
	case "threads":
		go func() { echoDone <- echo(toEcho[0], fromEcho[1], n, pages) }()
	case "processes":
		cmd := exec.Command("/proc/self/exe", "-child", strconv.Itoa(n), strconv.Itoa(pages))
		cmd.ExtraFiles = []*os.File{os.NewFile(uintptr(toEcho[0]), "r"), os.NewFile(uintptr(fromEcho[1]), "w")}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		go func() { echoDone <- cmd.Wait() }()
	default:
		return 0, fmt.Errorf("unknown mode %q", mode)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := pinToCPU0(); err != nil {
		return 0, err
	}
	buf := make([]byte, (pages+1)*4096)
	b := []byte{0}
	if _, err := syscall.Read(fromEcho[0], b); err != nil { // the echo end is ready
		return 0, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		touch(buf, pages)
		if _, err := syscall.Write(toEcho[1], b); err != nil {
			return 0, err
		}
		if _, err := syscall.Read(fromEcho[0], b); err != nil {
			return 0, err
		}
	}
	elapsed := time.Since(start)
	if err := <-echoDone; err != nil {
		return 0, fmt.Errorf("%s echo end: %w", mode, err)
	}
	return elapsed, nil
}
