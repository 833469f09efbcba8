package cli

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pgqueue"
)

// A validation error's fields become flags; the key, whatever it spells, stays as it is.
func TestInFlagNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, `throttle: limit "Burst": --burst must be 0 when --rps is not set, got 3`,
		inFlagNames(`throttle: limit "Burst": Burst must be 0 when RequestsPerSecond is not set, got 3`, "Burst"))
	require.Equal(t, `throttle: limit "k": --output-token-burst must be 0 when --otpm is not set, got 2`,
		inFlagNames(`throttle: limit "k": OutputTokenBurst must be 0 when OutputTokensPerMinute is not set, got 2`, "k"))
}

// status's HEAD WAITS ON is the head's last wait in explain's words (words.WaitWords); a reason
// with its limit's key as Ticket.WaitReason records it reads as the key's own.
func TestHeadWaits(t *testing.T) {
	t.Parallel()
	for _, s := range []struct {
		head, want string
	}{{"paused", "the pause of openai"}, {"output_tokens", "output tokens of openai"}, {"concurrency of tenant:acme", "concurrency of tenant:acme"}, {"", "none"}} {
		var ks pgqueue.KeyStatus
		ks.Configured.Key, ks.HeadWaitReason = "openai", s.head
		require.Equal(t, s.want, headWaits(ks), "head %q", s.head)
	}
}

// The command's JSON keeps the fields' order, writes a rolling period in seconds and what is not
// known as null; a reported usage stays as it is, 0 included.
func TestWriteJSON(t *testing.T) {
	t.Parallel()
	type allowance struct {
		Meter   string        `json:"meter"`
		Rolling time.Duration `json:"rolling,omitempty"`
	}
	type ticket struct {
		ID           int64       `json:"id"`
		ActualCost   int64       `json:"actual_cost"`
		ActualOutput int64       `json:"actual_output"`
		ActualMoney  int64       `json:"actual_money"`
		Allowances   []allowance `json:"allowances"`
		Note         string      `json:"note"`
	}
	var b strings.Builder
	require.NoError(t, writeJSON(&b, []ticket{
		{ID: 2, ActualCost: -1, ActualMoney: -1, Allowances: []allowance{{"requests", 90 * time.Minute}, {"tokens", 0}}, Note: "<b>&"},
		{ID: 1, ActualCost: 0, ActualOutput: 0, ActualMoney: 0},
	}))
	require.Equal(t, `[{"id":2,"actual_cost":null,"actual_output":null,"actual_money":null,"allowances":[{"meter":"requests","rolling_s":5400},{"meter":"tokens"}],"note":"\u003cb\u003e\u0026"},`+
		`{"id":1,"actual_cost":0,"actual_output":0,"actual_money":0,"allowances":null,"note":""}]`+"\n", b.String())
}

// A build between releases names the last release its tree records and sorts after it; a release's
// tag, a pseudo-version after a tag or any other stamp is reported as it is.
func TestDescribeVersion(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "89a31b2c3d4e5f60718293a4b5c6d7e8f9012345"},
		{Key: "vcs.time", Value: "2026-12-07T02:56:30Z"}, {Key: "vcs.modified", Value: "true"},
	}
	devel := func(settings []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings}
	}
	const after = " (unreleased changes after v0.1.0, see CHANGELOG.md"
	for _, c := range []struct {
		name          string
		bi            *debug.BuildInfo
		stamped, last string
		want          string
	}{
		{"StampedTag", devel(vcs), "v0.1.0", "v0.1.0", "v0.1.0"},
		{"StampedCommit", devel(nil), "89a31b2c3d4e", "v0.1.0", "v0.1.1-dev+89a31b2c3d4e" + after + ")"},
		{"StampedDirtyCommit", devel(vcs), "89a31b2c3d4e-dirty", "v0.1.0", "v0.1.1-dev+89a31b2c3d4e.modified" + after + ")"},
		{"StampedOther", devel(vcs), "v0.1.0-3-g89a31b2-dirty", "v0.1.0", "v0.1.0-3-g89a31b2-dirty"},
		{"Tagged", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "", "v0.1.0", "v0.1.0"},
		{"PseudoVersionAfterTag", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261207025630-89a31b2c3d4e+dirty"}, Settings: vcs}, "", "v0.1.0",
			"v0.1.1-0.20261207025630-89a31b2c3d4e+dirty"},
		{"PseudoVersionWithoutTag", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261207025630-89a31b2c3d4e+dirty"}}, "", "v0.1.0",
			"v0.1.1-dev+89a31b2c3d4e.modified" + after + ")"},
		{"CheckoutModified", devel(vcs), "", "v0.1.0", "v0.1.1-dev+89a31b2c3d4e.modified" + after + "; committed 2026-12-07T02:56:30Z)"},
		{"CheckoutClean", devel(vcs[:3]), "", "v0.1.0", "v0.1.1-dev+89a31b2c3d4e" + after + "; committed 2026-12-07T02:56:30Z)"},
		{"CheckoutWithoutVCS", devel(nil), "", "v0.1.0", "v0.1.1-dev" + after + "; commit unknown)"},
		{"NoBuildInfo", nil, "", "v0.1.0", "v0.1.1-dev" + after + "; commit unknown)"},
		{"AfterPreRelease", devel(vcs[:2]), "", "v0.2.0-rc.1", "v0.2.0-rc.1.dev+89a31b2c3d4e (unreleased changes after v0.2.0-rc.1, see CHANGELOG.md)"},
		{"NoReleaseYet", devel(vcs[:2]), "", "", "v0.0.0-dev+89a31b2c3d4e (no release yet)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, describeVersion(c.bi, c.stamped, c.last).String())
		})
	}
}

// The command's constant names the release api/releases.txt records last: the commit that records a
// release sets both (docs/upgrading.md).
func TestLastReleaseIsRecorded(t *testing.T) {
	t.Parallel()
	record, err := os.ReadFile("../../../../api/releases.txt")
	require.NoError(t, err)
	var last string
	for line := range strings.Lines(string(record)) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			last = f[0]
		}
	}
	require.NotEmpty(t, last, "api/releases.txt records no release")
	require.Equal(t, last, lastRelease,
		"cli.lastRelease must name the last release in api/releases.txt: set it in the commit that records the release")
	require.Regexp(t, releaseVersion, lastRelease)
}
