package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// TestParseBackstoreLinksAndSharing: validation refuses a file backstore that is a
// symbolic link, and allow_shared_file where it means nothing.
func TestParseBackstoreLinksAndSharing(t *testing.T) {
	l := testutil.MakeLinks(t)
	real, link, dangling := l.File, l.Link, l.Dangling

	head := "listeners: [{address: 0.0.0.0, port: 1}]\nluns:\n  - lun: 0\n"
	cases := []struct {
		name string
		lun  string
		want []string // nil: valid
	}{
		{name: "real file", lun: "    backstore: file\n    path: " + real + "\n"},
		{name: "real file, shared allowed", lun: "    backstore: file\n    path: " + real + "\n    allow_shared_file: true\n"},
		{name: "link", lun: "    backstore: file\n    path: " + link + "\n    allow_shared_file: true\n",
			want: []string{"t.yaml:5: luns[0].path: " + link + " is a symbolic link to " + real +
				": name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)"}},
		{name: "dangling link with create", lun: "    backstore: file\n    path: " + dangling + "\n    create: true\n    size: 1MiB\n",
			want: []string{"t.yaml:5: luns[0].path: " + dangling + " is a symbolic link to " + l.Missing +
				": name the real file (links are not followed, so that whoever can change one cannot point the LUN at another file)"}},
		{name: "memory", lun: "    backstore: memory\n    size: 1MiB\n    allow_shared_file: true\n",
			want: []string{"t.yaml:6: luns[0].allow_shared_file: allow_shared_file applies to file and block backstores only"}},
		{name: "null", lun: "    backstore: null\n    size: 1MiB\n    allow_shared_file: false\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("t.yaml", []byte(head+c.lun))
			if c.want == nil {
				require.NoError(t, err)
				require.Empty(t, cfg.Warnings())
				return
			}
			require.Equal(t, c.want, errorLines(t, err))
		})
	}
}

// TestFileProblem: what LoadTrusted refuses in a file's owner and mode, and how to fix it.
func TestFileProblem(t *testing.T) {
	const f = "/etc/srptarget.yaml"
	cases := []struct {
		name            string
		uid, mode, euid uint32
		want            string // "" accepted
	}{
		{name: "root's, 0644, root daemon", uid: 0, mode: 0o100644, euid: 0},
		{name: "root's, 0600, daemon user", uid: 0, mode: 0o100600, euid: 998},
		{name: "daemon user's own", uid: 998, mode: 0o100640, euid: 998},
		{name: "group-writable", uid: 0, mode: 0o100664, euid: 0,
			want: "its mode 0664 lets its group write it, and whoever can change it can export any file of this host to any initiator; fix it with `chmod go-w /etc/srptarget.yaml`"},
		{name: "world-writable", uid: 0, mode: 0o100646, euid: 0,
			want: "its mode 0646 lets every user write it, and whoever can change it can export any file of this host to any initiator; fix it with `chmod go-w /etc/srptarget.yaml`"},
		{name: "another user's", uid: 1000, mode: 0o100644, euid: 0,
			want: "it is owned by uid 1000, neither root nor uid 0 that srptarget runs as, and whoever can change it can export any file of this host to any initiator; fix it with `chown root /etc/srptarget.yaml`"},
		{name: "another user's, writable by all", uid: 1000, mode: 0o100666, euid: 998,
			want: "it is owned by uid 1000, neither root nor uid 998 that srptarget runs as and its mode 0666 lets its group and others write it, and whoever can change it can export any file of this host to any initiator; fix it with `chown root /etc/srptarget.yaml` and `chmod go-w /etc/srptarget.yaml`"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, fileProblem(f, c.uid, c.mode, c.euid))
		})
	}
}

// errorLines requires err to be Errors and returns its messages, one a line as validate
// prints them.
func errorLines(t testing.TB, err error) []string {
	t.Helper()
	errs := AsErrors(err)
	require.NotNil(t, errs, "an error of type %T: %v", err, err)
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	return out
}

// TestParseTextLooksAtNoPath: a configuration that Parse checks against the file system (a
// link and its target, a missing file, a file that is no block device, a missing ceph.conf)
// gives ParseText nothing to say about those paths; what the text alone shows is still
// checked.
func TestParseTextLooksAtNoPath(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret-target")
	link := filepath.Join(dir, "link.img")
	require.NoError(t, os.WriteFile(secret, nil, 0o600))
	require.NoError(t, os.Symlink(secret, link))
	text := `listeners: [{address: 0.0.0.0, port: 5555}]
luns:
  - lun: 0
    backstore: file
    path: ` + link + `
  - lun: 1
    backstore: file
    path: ` + dir + `/missing.img
  - lun: 2
    backstore: block
    path: ` + secret + `
  - lun: 3
    backstore: rbd
    rbd: {image: img, ceph_conf: ` + dir + `/no-ceph.conf}
acls:
  - initiators: ["*"]
    luns: [0, 1, 2, 3]
`
	_, err := Parse("c.yaml", []byte(text))
	got := strings.Join(errorLines(t, err), "\n")
	require.Contains(t, got, "is a symbolic link to "+secret)
	require.Contains(t, got, "missing.img does not exist")
	require.Contains(t, got, "is not a block device")

	cfg, err := ParseText("c.yaml", []byte(text))
	require.NoError(t, err)
	for _, w := range cfg.Warnings() {
		require.NotContains(t, w.Error(), dir, "a warning about a path")
	}
	require.NoError(t, cfg.Validate(), "validating again looks at no path either")

	// The text's own errors are still found.
	_, err = ParseText("c.yaml", []byte(strings.Replace(text, "path: "+link, "path: relative.img", 1)))
	require.ErrorContains(t, err, "relative.img is a relative path")
}
