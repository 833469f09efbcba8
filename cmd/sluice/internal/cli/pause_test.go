package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
)

// An operator's pause is set as given: --for shortens a provider's longer pause (and extends a
// shorter one), --until sets the instant, one not after now lifts it; the output shows the pause set.
func TestCLI_PauseAsGiven(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	pausedUntil := func() time.Time {
		t.Helper()
		ls, err := f.q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		return ls.State.PausedUntil
	}

	require.NoError(t, f.q.Pause(ctx, "openai", time.Now().Add(18*time.Minute)), "a provider's 429")
	code, out, errOut := f.run(t, "pause", "openai", "--for", "1m")
	require.Equal(t, cli.ExitOK, code, errOut)
	t.Logf("sluice pause openai --for 1m, paused for 18 minutes:\n%s", out)
	require.WithinDuration(t, time.Now().Add(time.Minute), pausedUntil(), 30*time.Second, "shortened to 1 minute, not left at 18")
	require.Regexp(t, `^openai paused until \S+Z \(1m0s from now\)\n`, out)
	require.Contains(t, out, "PAUSED FOR")

	code, _, errOut = f.run(t, "pause", "openai", "--for", "2h")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), pausedUntil(), 30*time.Second, "extended")

	until := time.Now().Add(5 * time.Minute).UTC().Truncate(time.Second)
	code, out, errOut = f.run(t, "pause", "openai", "--until", until.Format(time.RFC3339))
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Equal(t, until, pausedUntil().UTC(), "paused until the instant given")
	require.Contains(t, out, "openai paused until "+until.Format(time.RFC3339))

	code, out, errOut = f.run(t, "pause", "openai", "--until", time.Now().Add(-time.Minute).Format(time.RFC3339), "--json")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.True(t, pausedUntil().IsZero(), "an instant not after now lifts the pause")
	require.NotContains(t, out, `"paused_until"`)
	require.True(t, strings.HasPrefix(out, "["), "--json prints JSON only: %s", out)
}

// Bad pauses get a message naming what is wrong, the bad-input exit code, nothing on stdout, and
// change nothing.
func TestCLI_PauseBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"pause", "openai"}, "pause openai: give --for D (e.g. 10m) or --until TIME (RFC 3339, e.g. 2026-12-06T15:04:05Z)"},
		{[]string{"pause", "openai", "--for", "1m", "--until", "2026-12-06T15:04:05Z"}, "pause openai: give --for or --until, not both"},
		{[]string{"pause", "openai", "--for", "0s"}, "pause openai: --for must be a duration from 1ns to 8784h (e.g. 10m), got 0s"},
		{[]string{"pause", "openai", "--for", "-5m"}, "--for must be a duration from 1ns to 8784h (e.g. 10m), got -5m0s"},
		{[]string{"pause", "openai", "--for", "9000h"}, "got 9000h0m0s"},
		{[]string{"pause", "openai", "--for", "ten"}, `invalid value "ten" for flag -for: must be a duration`},
		{[]string{"pause", "openai", "--until", "tomorrow"}, `invalid value "tomorrow" for flag -until: must be an instant in RFC 3339, such as 2026-12-06T15:04:05Z`},
		{[]string{"pause", "openai", "--until", "2026-12-06 15:04"}, `got "2026-12-06 15:04"`},
		{[]string{"pause", "openai", "--until", time.Now().Add(400 * 24 * time.Hour).UTC().Format(time.RFC3339)}, "--until must be at most 8784h from now"},
	} {
		code, out, errOut := f.run(t, c.args...)
		require.Equal(t, cli.ExitUsage, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
		require.Empty(t, out, "%v prints nothing on stdout", c.args)
	}
	ls, err := f.q.LimitStatus(ctx, "openai")
	require.NoError(t, err)
	require.True(t, ls.State.PausedUntil.IsZero(), "no bad pause paused anything")
	code, out, errOut := f.run(t, "pause", "nope", "--until", time.Now().Add(time.Minute).Format(time.RFC3339))
	require.Equal(t, cli.ExitNotFound, code, errOut)
	require.Contains(t, errOut, `"nope"`)
	require.Empty(t, out)
}
