package checks

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Daemon is one srptarget serve process: started, watched, asked over its control socket, and
// stopped. Its output goes to its own log file and, as it comes, to the console prefixed
// "srptarget[N]| " (e2e.sh takes the daemon's log out of the console by that prefix).
type Daemon struct {
	lab *Lab
	Bin string
	// Control is the control socket (serve --control), "" for the default.
	Control string
	N       int    // instance number, for the console prefix
	LogPath string // its output
	PID     int
	Started time.Duration // Uptime when it was started
	// Ended is the Uptime when its exit was seen, 0 while it runs.
	Ended time.Duration

	cmd    *exec.Cmd
	done   chan struct{}
	code   int            // exit status once done; -1 for a signal
	signal syscall.Signal // the signal that ended it, 0 for none
}

// DaemonOptions say how to start a daemon.
type DaemonOptions struct {
	Bin  string
	N    int    // instance number
	Dir  string // where its log goes (srptarget-N.log)
	Env  []string
	Args []string // after serve
	// Thin are messages logged once per login, channel or task management function: the
	// console shows their first 6 lines and then every 100th (a storm of refused logins would
	// otherwise take minutes of serial console); the log file has them all.
	Thin []Msg
}

// StartDaemon starts `bin serve ARGS...` as instance n, its output in dir/srptarget-N.log.
func (l *Lab) StartDaemon(bin string, n int, dir string, args ...string) (*Daemon, error) {
	return l.Start(DaemonOptions{Bin: bin, N: n, Dir: dir, Args: args})
}

// Start starts a daemon.
func (l *Lab) Start(o DaemonOptions) (*Daemon, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	d := &Daemon{lab: l, Bin: o.Bin, N: o.N, LogPath: filepath.Join(o.Dir, fmt.Sprintf("srptarget-%d.log", o.N)), done: make(chan struct{})}
	for i, a := range o.Args {
		if a == "--control" && i+1 < len(o.Args) {
			d.Control = o.Args[i+1]
		}
	}
	f, err := os.Create(d.LogPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve"}, o.Args...)
	l.Printf("SRPTVM$ %s %s %s  (instance %d, log %s)", strings.Join(o.Env, " "), o.Bin, strings.Join(args, " "), o.N, d.LogPath)
	d.cmd = exec.Command(o.Bin, args...)
	d.cmd.Env = append(os.Environ(), o.Env...)
	w := io.MultiWriter(f, &prefixWriter{w: l.out, prefix: fmt.Sprintf("srptarget[%d]| ", o.N), thin: o.Thin, seen: map[Msg]int{}})
	d.cmd.Stdout, d.cmd.Stderr = w, w
	d.Started = Uptime()
	if err := d.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	d.PID = d.cmd.Process.Pid
	go func() {
		err := d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		if err != nil && d.code == 0 {
			d.code = -1
		}
		if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			d.signal = ws.Signal()
		}
		f.Close()
		d.Ended = Uptime()
		close(d.done)
	}()
	return d, nil
}

// Alive says whether the process still runs.
func (d *Daemon) Alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Listening says whether it runs and an RDMA/CM id listens on port.
func (d *Daemon) Listening(port int) bool { return d.Alive() && CMListening(port) }

// Serving says whether it listens on port and has started: srptarget status says "serving".
// The listener is bound while the start-up still builds the logical units, and until it ends
// the control socket answers from the configuration file (LUNs without their restored
// reservations, no sessions), so a check that asks the daemon waits for this, not Listening.
func (d *Daemon) Serving(port int) bool {
	if !d.Listening(port) {
		return false
	}
	st, err := d.Status()
	return err == nil && st.State == "serving"
}

// WaitExit waits up to timeout for the process to end and returns its exit status.
func (d *Daemon) WaitExit(timeout time.Duration) (code int, ok bool) {
	select {
	case <-d.done:
		return d.code, true
	case <-time.After(timeout):
		return 0, false
	}
}

// KilledBy is the signal that ended the process, 0 while it runs or when it exited.
func (d *Daemon) KilledBy() syscall.Signal {
	if d.Alive() {
		return 0
	}
	return d.signal
}

// Signal sends sig to the process.
func (d *Daemon) Signal(sig syscall.Signal) error { return d.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to timeout for the exit (SIGKILL after it); the exit status,
// or an error when it had to be killed or had exited already.
func (d *Daemon) Stop(timeout time.Duration) (int, error) {
	if !d.Alive() {
		return d.code, fmt.Errorf("not running before SIGTERM (exit status %d)", d.code)
	}
	if err := d.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	if code, ok := d.WaitExit(timeout); ok {
		return code, nil
	}
	_ = d.Signal(syscall.SIGKILL)
	d.WaitExit(10 * time.Second)
	return d.code, fmt.Errorf("still running %v after SIGTERM", timeout)
}

// Gone is a note for a failed check: "" while the daemon runs, else its exit status and its
// last error line.
func (d *Daemon) Gone() string {
	if d == nil || d.Alive() {
		return ""
	}
	last := ""
	for _, l := range d.Problems() {
		last = l
	}
	return fmt.Sprintf("; srptarget is not running (exit status %d): %s", d.code, last)
}

// LogMark is the number of lines the daemon has logged, for LogSince.
func (d *Daemon) LogMark() int { return len(readLines(d.LogPath)) }

// LogLines are the lines with message m that the daemon logged after mark (LogMark; 0 for
// all).
func (d *Daemon) LogLines(m Msg, mark int) []LogLine {
	var out []LogLine
	lines := readLines(d.LogPath)
	for _, s := range lines[min(mark, len(lines)):] {
		if l, ok := ParseLogLine(s); ok && l.Is(m) {
			out = append(out, l)
		}
	}
	return out
}

// Problems are the lines of the log at level ERROR or worse, and what the Go runtime writes
// when it crashes (panic:, fatal error:).
func (d *Daemon) Problems() []string {
	var out []string
	for _, s := range readLines(d.LogPath) {
		if l, ok := ParseLogLine(s); ok {
			switch l.Level {
			case "ERROR", "DPANIC", "PANIC", "FATAL":
				out = append(out, s)
			}
		} else if strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ") {
			out = append(out, s)
		}
	}
	return out
}
