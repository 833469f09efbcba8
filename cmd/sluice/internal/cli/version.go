package cli

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
)

// lastRelease is the last release this tree records: the version on the last line of
// api/releases.txt. The commit that adds a release's line there sets this constant too
// (docs/upgrading.md, "The record of releases"); TestLastReleaseIsRecorded fails until the two
// agree. Go's embed cannot reach api/ from this package, hence the copy.
const lastRelease = "v0.1.0"

// stampedVersion, when set at link time, is what the command reports. `make bin/sluice` stamps the
// release tag when HEAD is one and the tree is clean, else the commit, "-dirty" when the tree has
// uncommitted changes (a clone need not carry tags, and CI's does not):
//
//	go build -ldflags "-X github.com/sluicehq/sluice/cmd/sluice/internal/cli.stampedVersion=$(git describe --always --dirty --abbrev=12 --exclude '*')"
//
// A commit becomes a version after lastRelease (see describeVersion); anything else is reported as
// stamped. Go stamps no VCS information in a git worktree, nor with -buildvcs=false.
var stampedVersion string

// versionInfo is what `sluice version` prints.
type versionInfo struct {
	// Version is a release's tag, a Go pseudo-version, or for a build between releases a
	// semantic version that sorts after AfterRelease and before any later release:
	// v0.1.1-dev+89a31b2c3d4e (".modified" when the tree had uncommitted changes).
	Version string `json:"version"`
	// AfterRelease is, for a build between releases, the last release its tree records: its
	// changes since are CHANGELOG.md's [Unreleased] section.
	AfterRelease string `json:"after_release,omitempty"`
	Revision     string `json:"revision,omitempty"`
	Time         string `json:"time,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
}

// String is the version, then for a build between releases the release it follows and where its
// changes are told, and the commit's time when known.
func (v versionInfo) String() string {
	var notes []string
	switch {
	case v.AfterRelease != "":
		notes = append(notes, "unreleased changes after "+v.AfterRelease+", see CHANGELOG.md")
	case v.Revision != "":
		notes = append(notes, "no release yet")
	}
	if v.AfterRelease != "" && v.Revision == "" {
		notes = append(notes, "commit unknown")
	}
	if v.Time != "" {
		notes = append(notes, "committed "+v.Time)
	}
	if len(notes) == 0 {
		return v.Version
	}
	return v.Version + " (" + strings.Join(notes, "; ") + ")"
}

var (
	// stampedCommit is a commit as `make bin/sluice` stamps it off a release tag.
	stampedCommit = regexp.MustCompile(`^([0-9a-f]{7,40})(-dirty)?$`)
	// untaggedPseudo is the pseudo-version Go gives a commit when no tag precedes it (Go 1.24 and
	// later stamp a build from a tagless clone with it): it says nothing of the releases before.
	untaggedPseudo = regexp.MustCompile(`^v0\.0\.0-\d{14}-([0-9a-f]{12})(\+dirty)?$`)
	// releaseVersion is a release's version as api/releases.txt records it.
	releaseVersion = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)
)

// describeVersion says what the command was built from, given its build information (bi may be
// nil), its link-time stamp and the last release its tree records (last may be empty):
//   - a stamp that is a commit, a build from a checkout ("(devel)") and Go's pseudo-version of an
//     untagged commit are builds between releases, named after last (see devVersion) with the
//     commit and its time when known;
//   - any other stamp, a tag (go install ...@v0.1.0) or a pseudo-version after a tag already names
//     the commit, and is reported as it is.
func describeVersion(bi *debug.BuildInfo, stamped, last string) versionInfo {
	if stamped != "" {
		m := stampedCommit.FindStringSubmatch(stamped)
		if m == nil {
			return versionInfo{Version: stamped}
		}
		return devVersion(last, m[1], m[2] != "", "")
	}
	if bi == nil {
		return devVersion(last, "", false, "")
	}
	var revision, commitTime string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			commitTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	switch v := bi.Main.Version; {
	case v == "" || v == "(devel)":
	case untaggedPseudo.MatchString(v):
		m := untaggedPseudo.FindStringSubmatch(v)
		revision = cmp.Or(revision, m[1])
		modified = modified || m[2] != ""
	default:
		return versionInfo{Version: v}
	}
	return devVersion(last, revision, modified, commitTime)
}

// devVersion names a build between releases as a semantic version that sorts after last and before
// any release that follows it, as Go's pseudo-versions do: v0.1.0 gives v0.1.1-dev, v0.2.0-rc.1
// gives v0.2.0-rc.1.dev, and no release v0.0.0-dev. The commit (12 hex digits) and ".modified"
// are its build metadata.
func devVersion(last, revision string, modified bool, commitTime string) versionInfo {
	v := versionInfo{Version: "v0.0.0-dev", Revision: revision[:min(len(revision), 12)], Time: commitTime, Modified: modified}
	if m := releaseVersion.FindStringSubmatch(last); m != nil {
		v.AfterRelease = last
		if m[4] != "" {
			v.Version = last + ".dev"
		} else {
			patch, _ := strconv.Atoi(m[3])
			v.Version = fmt.Sprintf("v%s.%s.%d-dev", m[1], m[2], patch+1)
		}
	}
	var meta []string
	if v.Revision != "" {
		meta = append(meta, v.Revision)
	}
	if modified {
		meta = append(meta, "modified")
	}
	if len(meta) > 0 {
		v.Version += "+" + strings.Join(meta, ".")
	}
	return v
}

// runVersion prints the version of the module the command was built from (see describeVersion).
func runVersion(_ context.Context, r *runner, args []string) error {
	pos, err := r.parse(r.flagSet("version"), "version", args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("version takes no arguments, got %q", pos)
	}
	bi, _ := debug.ReadBuildInfo()
	v := describeVersion(bi, stampedVersion, lastRelease)
	if r.g.json {
		return writeJSON(r.env.Stdout, v)
	}
	_, err = fmt.Fprintln(r.env.Stdout, "sluice", v)
	return err
}
