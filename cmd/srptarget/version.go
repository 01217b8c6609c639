package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
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

// buildInfo says what a binary is: srptarget version, status, the log's first line, the man
// pages and the srptarget_build_info metric show it.
type buildInfo struct {
	// Version is the release, then the commit's first 12 hex digits when known, then
	// ".modified" when the tree had uncommitted changes: 0.1.0+7960dc2c1a0b.modified
	// (SemVer 2.0's build metadata).
	Version    string `json:"version"`
	Release    string `json:"release"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
	// Backstores are the backstore kinds this binary serves: rbd only when built with the
	// rbd tag, which links librbd and librados (and Ceph's libraries with them).
	Backstores []string `json:"backstores"`
}

// build is this binary's buildInfo.
var build = readBuildInfo()

// version is build.Version.
var version = build.Version

func readBuildInfo() buildInfo {
	b := buildInfo{
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
	if rbdBuilt {
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
func versionText(b buildInfo) string {
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
	if b.hasRBD() {
		s.WriteString(" (rbd links librbd and librados)")
	} else {
		s.WriteString(" (no rbd: built without the rbd tag, links no Ceph library)")
	}
	s.WriteByte('\n')
	return s.String()
}

func (b buildInfo) hasRBD() bool {
	for _, k := range b.Backstores {
		if k == "rbd" {
			return true
		}
	}
	return false
}
