package checks

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeDaemon is a shell script standing in for srptarget: serve logs two lines and waits for
// SIGTERM (exit 0); stats and reload answer as the control client does with --json.
const fakeDaemon = `#!/bin/sh
case $1 in
serve)
	printf '2026-12-06 19:42:40.477\tINFO\tlogin accepted\t{"initiator": "0x01", "channel": 1}\n'
	printf '2026-12-06 19:42:41.000\tERROR\tbackstore failed\t{"lun": 1}\n'
	trap 'echo bye; exit 0' TERM
	while :; do sleep 0.05; done ;;
stats)
	echo '{"version": 1, "ok": true, "result": [{"name": "logins_accepted", "value": 3}]}' ;;
reload)
	echo '{"version": 1, "ok": true, "result": {"dry_run": false, "applied": false, "errors": ["x.yaml:3: luns: bad"], "luns_added": []}}'
	echo 'reload refused: 1 error' >&2
	exit 1 ;;
esac
`

func fakeLab(t *testing.T) (*Lab, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "srptarget")
	require.NoError(t, os.WriteFile(bin, []byte(fakeDaemon), 0o755))
	return &Lab{out: &bytes.Buffer{}, results: filepath.Join(dir, "results")}, bin
}

func TestDaemon(t *testing.T) {
	l, bin := fakeLab(t)
	d, err := l.StartDaemon(bin, 2, t.TempDir(), "--config", "x.yaml", "--control", "/run/x.sock")
	require.NoError(t, err)
	require.Equal(t, "/run/x.sock", d.Control)
	require.True(t, WaitFor(5*time.Second, func() bool { return d.LogMark() == 2 }))
	require.True(t, d.Alive())
	require.Empty(t, d.Gone())

	lines := d.LogLines(MsgLoginRejected, 0)
	require.Empty(t, lines)
	lines = d.LogLines("login accepted", 0)
	require.Len(t, lines, 1)
	require.Equal(t, "0x01", lines[0].Field("initiator"))
	require.Empty(t, d.LogLines("login accepted", 1), "after the mark")
	require.Len(t, d.Problems(), 1)

	code, err := d.Stop(5 * time.Second)
	require.NoError(t, err)
	require.Zero(t, code)
	require.False(t, d.Alive())
	require.Contains(t, d.Gone(), "exit status 0")
	_, err = d.Stop(time.Second)
	require.Error(t, err, "a second stop finds it gone")

	// the console has each line once, prefixed with the instance
	out := l.out.(*bytes.Buffer).String()
	require.Contains(t, out, "srptarget[2]| 2026-12-06 19:42:40.477\tINFO\tlogin accepted")
	require.Contains(t, out, "srptarget[2]| bye\n")
	require.Equal(t, 1, strings.Count(out, "backstore failed"))
}

func TestDaemonAsk(t *testing.T) {
	l, bin := fakeLab(t)
	d := &Daemon{lab: l, Bin: bin}
	st, err := d.Stats()
	require.NoError(t, err)
	n, err := st.Get("logins_accepted")
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	_, err = st.Get("logins_acepted")
	require.Error(t, err, "a counter the daemon does not have is no 0")

	r, code, err := d.Reload(false)
	require.NoError(t, err, "a refused reload still answers")
	require.Equal(t, 1, code)
	require.False(t, r.Applied)
	require.Equal(t, []string{"x.yaml:3: luns: bad"}, r.Errors)

	_, err = d.Status()
	require.Error(t, err, "no answer")
}

func TestCheckRecords(t *testing.T) {
	l, _ := fakeLab(t)
	require.True(t, l.Check(t, "a check", func(c *C) { c.Pass("%d of %d", 2, 2) }))
	require.True(t, l.Check(t, "equal", func(c *C) { c.Equal("x|y", "x|y") }))
	t.Run("not selected", func(t *testing.T) {}) // a check -run leaves out records nothing
	b, err := os.ReadFile(l.results)
	require.NoError(t, err)
	require.Equal(t, "a check|pass|2 of 2\nequal|pass|x/y\n", string(b))
	require.Contains(t, l.out.(*bytes.Buffer).String(), "SRPTVM: check a check: pass (2 of 2)\n")

	l.aborted = "no daemon"
	require.False(t, l.Check(t, "after an abort", func(c *C) { t.Error("ran") }))
	l.Group(t, "group after an abort", "", func(t *testing.T) { t.Error("ran") })
}

// TestCheckRecordsFailures runs failing checks in a child test process (they fail it) and
// reads the rows they left.
func TestCheckRecordsFailures(t *testing.T) {
	if os.Getenv("CHECKS_FAILING") != "" {
		l := &Lab{out: os.Stdout, results: os.Getenv("CHECKS_FAILING")}
		l.Check(t, "fatal", func(c *C) { c.Fatalf("want %d, got %d", 2, 1); t.Error("not reached") })
		l.Check(t, "testify", func(c *C) { require.Equal(c, 2, 1, "the count") })
		l.Check(t, "equal", func(c *C) { c.Equal("a", "b") })
		l.Check(t, "abort", func(c *C) { c.Abort("no %s", "daemon") })
		l.Check(t, "after the abort", func(c *C) {})
		return
	}
	results := filepath.Join(t.TempDir(), "results")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCheckRecordsFailures$")
	cmd.Env = append(os.Environ(), "CHECKS_FAILING="+results)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the checks failed the child: %s", out)
	b, err := os.ReadFile(results)
	require.NoError(t, err)
	require.Equal(t, "fatal|fail|want 2, got 1\n"+
		"testify|fail|Not equal: expected: 2 actual : 1 the count\n"+
		"equal|fail|want 'a', got 'b'\n"+
		"abort|fail|no daemon\n", string(b))
}

func TestPrefixWriterThins(t *testing.T) {
	var out bytes.Buffer
	p := &prefixWriter{w: &out, prefix: "srptarget[1]| ", thin: []Msg{"login rejected"}, seen: map[Msg]int{}}
	for range 250 {
		_, err := p.Write([]byte("t\tWARN\tlogin rejected\t{}\nt\tINFO\tlogin accepted\t{}\n"))
		require.NoError(t, err)
	}
	_, _ = p.Write([]byte("half a li"))
	_, _ = p.Write([]byte("ne\n"))
	s := out.String()
	require.Equal(t, 6+2, strings.Count(s, "\tlogin rejected\t"), "the first 6, the 100th and the 200th")
	require.Contains(t, s, "srptarget[1]| (200th \"login rejected\") t\tWARN\tlogin rejected")
	require.Equal(t, 250, strings.Count(s, "login accepted"))
	require.Contains(t, s, "srptarget[1]| half a line\n")
}
