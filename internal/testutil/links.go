package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// Links is what the refusals of symbolic links where a backing file is named are tested on: in a
// new temporary directory Dir, a regular file of 4096 zero bytes (mode 0600), a link to it and a
// link to a name that does not exist.
type Links struct {
	Dir      string
	File     string // the regular file
	Link     string // a symbolic link to File
	Dangling string // a symbolic link to Missing
	Missing  string // a name in Dir that nothing is created at
}

// MakeLinks makes the file and the links of Links.
func MakeLinks(t testing.TB) Links {
	t.Helper()
	dir := t.TempDir()
	l := Links{Dir: dir, File: filepath.Join(dir, "file.img"), Link: filepath.Join(dir, "link.img"),
		Dangling: filepath.Join(dir, "dangling.img"), Missing: filepath.Join(dir, "missing.img")}
	if err := os.WriteFile(l.File, make([]byte, 4096), 0o600); err != nil {
		t.Fatalf("links: %v", err)
	}
	for _, ln := range [][2]string{{l.File, l.Link}, {l.Missing, l.Dangling}} {
		if err := os.Symlink(ln[0], ln[1]); err != nil {
			t.Fatalf("links: %v", err)
		}
	}
	return l
}
