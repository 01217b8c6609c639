package checks

import (
	"errors"
	"os"
	"os/exec"
	"strings"
)

// Out is what a command did: its output (stdout and stderr together) and exit status.
type Out struct {
	Text string
	// Code is the exit status; -1 when the command could not be started (Err says why) or
	// was killed by a signal.
	Code int
	Err  error
}

// OK says the command exited 0.
func (o Out) OK() bool { return o.Code == 0 }

// Lines is Text's lines, without the empty last one.
func (o Out) Lines() []string {
	t := strings.TrimRight(o.Text, "\n")
	if t == "" {
		return nil
	}
	return strings.Split(t, "\n")
}

// Run runs a command as the console shows it ("SRPTVM$ name args"), its output copied to the
// console after it.
func (l *Lab) Run(name string, args ...string) Out {
	l.Printf("SRPTVM$ %s", strings.Join(append([]string{name}, args...), " "))
	o := Quiet(name, args...)
	if o.Text != "" {
		l.Printf("%s", strings.TrimRight(o.Text, "\n"))
	}
	if o.Err != nil && o.Code == -1 {
		l.Printf("SRPTVM: %s: %v", name, o.Err)
	}
	return o
}

// Sh runs a shell command line through Run.
func (l *Lab) Sh(script string) Out { return l.Run("sh", "-c", script) }

// Quiet runs a command and returns what it did, showing nothing.
func Quiet(name string, args ...string) Out {
	b, err := exec.Command(name, args...).CombinedOutput()
	o := Out{Text: string(b), Err: err}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		o.Code = ee.ExitCode()
	default:
		o.Code = -1
	}
	return o
}

// Write writes text to a file (sysfs attributes, mostly) as `echo TEXT > PATH` would, and says
// so on the console.
func (l *Lab) Write(path, text string) error {
	l.Printf("SRPTVM$ echo '%s' > %s", text, path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
