// Package fileperm says who besides its owner may change a file, for the checks that refuse a
// configuration, a backstore or a state file that another user can write (as sshd's
// StrictModes does, sshd(8)).
package fileperm

import (
	"fmt"
	"strings"
)

// Writable says what of mode lets users other than the owner write the file ("its mode 0664
// lets its group write it") and the command that takes it away (`chmod go-w path`); both
// empty when the group and others cannot write.
func Writable(path string, mode uint32) (what, fix string) {
	var who string
	switch mode & 0o022 {
	case 0:
		return "", ""
	case 0o020:
		who = "its group"
	case 0o002:
		who = "every user"
	default:
		who = "its group and others"
	}
	return fmt.Sprintf("its mode %04o lets %s write it", mode&0o7777, who), "`chmod go-w " + path + "`"
}

// Problem says what lets another user than root or euid (the process's effective uid) change
// a file or directory owned by uid with mode mode, and the commands that fix it, chown to owner
// and chmod go-w, each joined with "and"; both empty when nothing does.
func Problem(path string, uid, mode, euid uint32, owner string) (what, fix string) {
	var whats, fixes []string
	if uid != 0 && uid != euid {
		whats = append(whats, fmt.Sprintf("it is owned by uid %d, neither root nor uid %d that srptarget runs as", uid, euid))
		fixes = append(fixes, "`chown "+owner+" "+path+"`")
	}
	if w, f := Writable(path, mode); w != "" {
		whats, fixes = append(whats, w), append(fixes, f)
	}
	return strings.Join(whats, " and "), strings.Join(fixes, " and ")
}
