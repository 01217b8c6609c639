package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/internal/control"
)

// release is the version of srptarget: a release bumps it, with its entry in CHANGELOG.md.
// Between releases it names the last one; the commit says what was built since.
const release = "0.1.0"

// The commit a build comes from and whether its tree had changes, for a build from a tree
// without .git (a source package): make build passes them as
// -ldflags "-X main.buildCommit=... -X main.buildModified=true|false". From a git checkout,
// go build stamps the same into the binary itself (debug.ReadBuildInfo's vcs.revision and
// vcs.modified), which is used when these are empty.
var (
	buildCommit   string
	buildModified string
)

// build is this binary's control.BuildInfo.
var build = readBuildInfo()

// version is build.Version.
var version = build.Version

func readBuildInfo() control.BuildInfo {
	b := control.BuildInfo{
		Release:   release,
		Commit:    buildCommit,
		Modified:  buildModified == "true",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
					b.Modified = false
				}
			case "vcs.time":
				b.CommitTime = s.Value
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.modified" && buildCommit == "" {
				b.Modified = s.Value == "true"
			}
		}
	}
	b.Version = formatVersion(release, b.Commit, b.Modified)
	b.Backstores = []string{"file", "block", "memory", "null"}
	if rbd.Built {
		b.Backstores = append(b.Backstores, "rbd")
	}
	return b
}

// formatVersion is release, +commit (12 hex digits) when known, and .modified.
func formatVersion(release, commit string, modified bool) string {
	v := release
	if commit != "" {
		v += "+" + commit[:min(12, len(commit))]
		if modified {
			v += ".modified"
		}
	}
	return v
}

// versionText is what srptarget version and srptarget --version print.
func versionText(b control.BuildInfo) string {
	var s strings.Builder
	fmt.Fprintf(&s, "srptarget %s\n", b.Version)
	switch {
	case b.Commit == "":
		s.WriteString("commit: unknown (built outside a git checkout without make build)\n")
	default:
		fmt.Fprintf(&s, "commit: %s", b.Commit)
		if t, err := time.Parse(time.RFC3339, b.CommitTime); err == nil {
			fmt.Fprintf(&s, " (%s)", t.UTC().Format(time.RFC3339))
		}
		if b.Modified {
			s.WriteString(", with uncommitted changes")
		}
		s.WriteByte('\n')
	}
	fmt.Fprintf(&s, "built with %s for %s\n", b.GoVersion, b.Platform)
	fmt.Fprintf(&s, "backstores: %s", strings.Join(b.Backstores, ", "))
	if hasRBD(b) {
		s.WriteString(" (rbd links librbd and librados)")
	} else {
		s.WriteString(" (no rbd: built without the rbd tag, links no Ceph library)")
	}
	s.WriteByte('\n')
	return s.String()
}

// hasRBD reports whether b serves rbd LUNs.
func hasRBD(b control.BuildInfo) bool { return slices.Contains(b.Backstores, "rbd") }
