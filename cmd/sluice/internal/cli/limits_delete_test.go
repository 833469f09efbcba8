package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/pgqueue"
)

// limits delete KEY --yes deletes a limit no unfinished ticket names, prints the deletion as the
// history recorded it, and limits history shows it; without --yes it says what would go and deletes
// nothing.
func TestCLI_LimitsDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	code, _, errOut := f.runAs("alice@laptop", "limits", "set", "gemini", "--create", "--rps", "5", "--max-concurrent", "3")
	require.Equal(t, cli.ExitOK, code, errOut)

	code, out, errOut := f.runAs("alice@laptop", "limits", "delete", "gemini")
	require.Equal(t, cli.ExitUsage, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, `sluice: limits delete gemini: this deletes the limit "gemini" on every replica: its configuration,`)
	require.Contains(t, errOut, "Pass --yes to delete it")
	_, err := f.q.Limit(ctx, "gemini")
	require.NoError(t, err, "nothing deleted without --yes")

	code, out, errOut = f.runAs("alice@laptop", "limits", "delete", "gemini", "--yes")
	require.Equal(t, cli.ExitOK, code, errOut)
	t.Logf("sluice limits delete gemini --yes\n%s", out)
	golden(t, "limits-delete", out, f.q.Schema())
	_, err = f.q.Limit(ctx, "gemini")
	require.ErrorIs(t, err, pgqueue.ErrUnknownLimit)

	code, out, errOut = f.run(t, "limits", "history", "gemini")
	require.Equal(t, cli.ExitOK, code, errOut)
	t.Logf("sluice limits history gemini\n%s", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 3, "a header, the creation and the deletion")
	require.Regexp(t, `  deleted  alice@laptop \(sluice limits delete\)  max_concurrent: 3 → none, requests_per_second: 5 → none, burst: 5 → none$`, lines[2])

	// Created again and deleted, with --json: the deletion's record.
	code, _, errOut = f.run(t, "limits", "set", "gemini", "--create", "--rps", "1")
	require.Equal(t, cli.ExitOK, code, errOut)
	code, out, errOut = f.runAs("bob@desk", "limits", "delete", "--yes", "gemini", "--json")
	require.Equal(t, cli.ExitOK, code, errOut)
	var rec pgqueue.LimitRecord
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
	require.Equal(t, pgqueue.ChangeDeleted, rec.Kind)
	require.Equal(t, "bob@desk (sluice limits delete)", rec.Who)
	require.Nil(t, rec.After)
	require.Equal(t, 1.0, rec.Before.RequestsPerSecond)
}

// limits delete refuses a key in use (with how many tickets name it), an unknown key and bad
// arguments, each with its exit code, and changes nothing.
func TestCLI_LimitsDeleteRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		// The fixture's 5 tickets name both keys: 3 queued, 2 admitted.
		{[]string{"limits", "delete", "openai", "--yes"}, cli.ExitFailed,
			`sluice: limit in use: "openai" is named by 5 unfinished tickets (queued, admitted or running): delete it once they finish (sluice tickets openai lists them)`},
		{[]string{"limits", "delete", "tenant:acme", "--yes"}, cli.ExitFailed, `"tenant:acme" is named by 5 unfinished tickets`},
		{[]string{"limits", "delete", "nope", "--yes"}, cli.ExitNotFound, `sluice: unknown limit: "nope"`},
		{[]string{"limits", "delete", "--yes"}, cli.ExitUsage, "limits delete takes one KEY, got 0"},
		{[]string{"limits", "delete", "a", "b", "--yes"}, cli.ExitUsage, "limits delete takes one KEY, got 2"},
		{[]string{"limits", "delete", " openai", "--yes"}, cli.ExitUsage, `limit Key must not begin or end with a space, got " openai"`},
		{[]string{"limits", "delete", "openai"}, cli.ExitUsage, "Pass --yes to delete it"},
	} {
		code, out, errOut := f.run(t, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
		require.Empty(t, out, "%v prints nothing on stdout", c.args)
	}
	code, _, errOut := f.run(t, "--json", "limits", "delete", "openai", "--yes")
	require.Equal(t, cli.ExitFailed, code)
	require.Contains(t, errOut, `{"error":"limit in use: \"openai\" is named by 5 unfinished tickets`)
	for _, key := range []string{"openai", "tenant:acme"} {
		_, err := f.q.Limit(ctx, key)
		require.NoError(t, err, "%s is still there", key)
	}
	problems, err := f.q.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// The usage names limits delete and its --yes.
func TestCLI_UsageNamesLimitsDelete(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(context.Background(), "", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, "| delete KEY --yes")
	code, out, _ = runCLI(context.Background(), "", "limits", "delete", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, "-yes")
}
