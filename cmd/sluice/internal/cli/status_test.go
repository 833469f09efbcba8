package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/throttle"
)

// Without KEYs, status shows the first --limit keys (of --prefix), and says how many it left out and
// how to see them; a schema of thousands of keys is not thousands of lines.
func TestCLI_StatusPrefixAndLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.q.UpsertLimits(ctx, throttle.Limit{Key: "tenant:beta", MaxConcurrent: 1}, throttle.Limit{Key: "tenant:gamma", MaxConcurrent: 1},
		throttle.Limit{Key: "tenant_x", MaxConcurrent: 1}))

	code, out, errOut := f.run(t, "status", "--prefix", "tenant:", "--limit", "2")
	require.Equal(t, cli.ExitOK, code, errOut)
	golden(t, "status-prefix", out, f.q.Schema())

	code, out, errOut = f.run(t, "status", "--prefix", "tenant:")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Equal(t, 4, strings.Count(out, "\n"), "a header and the three tenant: keys, nothing left out: %s", out)

	code, out, errOut = f.run(t, "--json", "status", "--prefix", "tenant:", "--limit", "1")
	require.Equal(t, cli.ExitOK, code, errOut)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows), "stdout is the rows alone")
	require.Len(t, rows, 1)
	var warning struct {
		Warning string `json:"warning"`
		Shown   int    `json:"shown"`
		Total   int64  `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(errOut), &warning), errOut)
	require.Equal(t, 1, warning.Shown)
	require.Equal(t, int64(3), warning.Total)
	require.Contains(t, warning.Warning, "--limit 3")

	// The default bound.
	var many []throttle.Limit
	for i := range cli.DefaultStatusLimit {
		many = append(many, throttle.Limit{Key: fmt.Sprintf("bulk:%04d", i), MaxConcurrent: 1})
	}
	require.NoError(t, f.q.UpsertLimits(ctx, many...))
	code, out, errOut = f.run(t, "status")
	require.Equal(t, cli.ExitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1+cli.DefaultStatusLimit+1, "a header, the first keys and a line for the others")
	require.Equal(t, "5 more keys not shown (200 of 205): name the keys, narrow with --prefix, or show them all with --limit 205", lines[len(lines)-1])
}

// A key that does not exist is named on stderr with exit code 3, after what the keys that do exist
// show: status and limits get alike, in text and in JSON.
func TestCLI_StatusUnknownKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, cmd := range [][]string{{"status"}, {"limits", "get"}} {
		code, out, errOut := f.run(t, append(cmd, "openai", "nosuchkey")...)
		require.Equal(t, cli.ExitNotFound, code, "%v", cmd)
		require.Regexp(t, `(?m)^openai `, out, "%v shows the key that exists", cmd)
		require.Equal(t, "sluice: unknown limit: [\"nosuchkey\"]\n", errOut, "%v", cmd)

		code, out, errOut = f.run(t, append([]string{"--json"}, append(cmd, "openai", "nosuchkey")...)...)
		require.Equal(t, cli.ExitNotFound, code, "%v", cmd)
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		require.Len(t, rows, 1, "%v --json shows the key that exists", cmd)
		require.JSONEq(t, `{"error":"unknown limit: [\"nosuchkey\"]","exit_code":3}`, errOut)

		code, out, _ = f.run(t, append(cmd, "nosuchkey")...)
		require.Equal(t, cli.ExitNotFound, code, "%v", cmd)
		require.Empty(t, out, "%v: no table of no key", cmd)
	}
}

// On a terminal each frame of a watch says how often it refreshes and when it was read.
func TestCLI_WatchHeader(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchCtx, stop := context.WithCancel(ctx)
	out := &frames{n: 8, cancel: stop}
	at := time.Date(2026, 3, 1, 4, 41, 38, 0, time.UTC)
	code := cli.Run(watchCtx, []string{"--database", f.url, "--schema", f.q.Schema(), "status", "--watch", "100ms"},
		cli.Env{Stdout: out, Stderr: os.Stderr, Getenv: func(string) string { return "" }, Terminal: true, Now: func() time.Time { return at }})
	require.Equal(t, cli.ExitOK, code)
	require.NoError(t, ctx.Err(), "the watch ended at the interrupt, not the deadline")
	sc := bufio.NewScanner(strings.NewReader(out.buf.String()))
	require.True(t, sc.Scan())
	require.Equal(t, "\x1b[H\x1b[2Jevery 100ms, at 04:41:38 UTC (Ctrl-C to stop)", sc.Text())
	require.True(t, sc.Scan())
	require.Empty(t, sc.Text())
	require.True(t, sc.Scan())
	require.True(t, strings.HasPrefix(sc.Text(), "KEY "), sc.Text())
}
