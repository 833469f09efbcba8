package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/pgqueue"
)

// runAs runs the command as operator (user@host) on the fixture's schema.
func (f fixture) runAs(operator string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), append([]string{"--schema", f.q.Schema()}, args...), cli.Env{Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string {
			if k == "DATABASE_URL" {
				return f.url
			}
			return ""
		}, Operator: operator})
	return code, out.String(), errOut.String()
}

// limits history prints who changed a key's limit, when and from what to what: the command's user
// and host, a change made in SQL by the session's user, the program that upserted it first.
func TestCLI_LimitsHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	code, _, errOut := f.runAs("alice@laptop", "limits", "set", "openai", "--rps", "20", "--max-concurrent", "3")
	require.Equal(t, cli.ExitOK, code, errOut)
	_, err := f.q.Pool().Exec(ctx, `UPDATE `+pgx.Identifier{f.q.Schema(), "sluice_limit"}.Sanitize()+
		` SET tokens_per_minute = 0.0001, token_burst = 1 WHERE key = 'openai'`)
	require.NoError(t, err)
	var sqlWho string
	require.NoError(t, f.q.Pool().QueryRow(ctx, `SELECT session_user || coalesce('@' || host(inet_client_addr()), ' (local socket)')`).Scan(&sqlWho))

	code, out, errOut := f.run(t, "limits", "history", "openai")
	require.Equal(t, cli.ExitOK, code, errOut)
	out = strings.ReplaceAll(strings.ReplaceAll(out, pgqueue.ProgramChangedBy(), "<program>"), sqlWho, "<session>")
	golden(t, "limits-history", out, f.q.Schema())
	require.Contains(t, out, "alice@laptop (sluice limits set)")
	require.Contains(t, out, "requests_per_second: 10 → 20, burst: 10 → 20", "a new rate gets its default burst back")
	require.Contains(t, out, "tokens_per_minute: 60000 → 0.0001", "a figure as set, never rounded to 0")

	code, out, errOut = f.run(t, "limits", "history", "openai", "--max", "1", "--since", "1h", "--json")
	require.Equal(t, cli.ExitOK, code, errOut)
	var got []pgqueue.LimitRecord
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1, "the last change only")
	require.Equal(t, pgqueue.ChangeConfigured, got[0].Kind)
	require.Equal(t, sqlWho, got[0].Who)
	require.Equal(t, 0.0001, got[0].After.TokensPerMinute)
	require.Equal(t, []pgqueue.FieldChange{{Field: "tokens_per_minute", Before: 60_000, After: 0.0001},
		{Field: "token_burst", Before: 60_000, After: 1}}, got[0].Changed)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line of JSON")

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"limits", "history"}, cli.ExitUsage, "limits history takes one KEY, got 0"},
		{[]string{"limits", "history", "nope"}, cli.ExitNotFound, `unknown limit: "nope"`},
		{[]string{"limits", "history", "openai", "--max", "0"}, cli.ExitUsage, `invalid value "0" for flag -max: must be a whole number from 1 to 10000, got "0"`},
		{[]string{"limits", "history", "openai", "--since", "0s"}, cli.ExitUsage, "--since must be a positive duration (e.g. 24h), got 0s"},
		{[]string{"limits", "history", "openai", "--since", "yesterday"}, cli.ExitUsage, `must be a duration: a number and a unit`},
	} {
		code, _, errOut := f.run(t, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
	}
}

// limits history lists the allowances added, removed and resized, and the changes of what they do
// when spent, in the table and in the JSON's changed.
func TestCLI_LimitsHistoryAllowances(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	code, _, errOut := f.runAs("alice@laptop", "limits", "set", "plan:free", "--create", "--allowance", "tokens=50000/day@America/Los_Angeles",
		"--allowance", "usd=0.50/day@America/Los_Angeles", "--on-spent", "refuse")
	require.Equal(t, cli.ExitOK, code, errOut)
	code, _, errOut = f.runAs("alice@laptop", "limits", "set", "plan:free", "--allowance", "tokens=70000/day@America/Los_Angeles",
		"--allowance", "requests=100/hour", "--on-spent", "wait")
	require.Equal(t, cli.ExitOK, code, errOut)
	code, _, errOut = f.runAs("alice@laptop", "limits", "set", "plan:free", "--on-spent", "refuse")
	require.Equal(t, cli.ExitOK, code, errOut)

	code, out, errOut := f.run(t, "limits", "history", "plan:free")
	require.Equal(t, cli.ExitOK, code, errOut)
	t.Logf("sluice limits history plan:free\n%s", out)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 4, "a header and three changes")
	for i, want := range []string{
		"allowances: none → tokens=50000/day@America/Los_Angeles (refuse), allowances: none → usd=0.50/day@America/Los_Angeles (refuse)",
		"allowances: tokens=50000/day@America/Los_Angeles (refuse) → tokens=70000/day@America/Los_Angeles (wait), " +
			"allowances: usd=0.50/day@America/Los_Angeles (refuse) → none, allowances: none → requests=100/hour (wait)",
		"allowances: tokens=70000/day@America/Los_Angeles (wait) → tokens=70000/day@America/Los_Angeles (refuse), " +
			"allowances: requests=100/hour (wait) → requests=100/hour (refuse)",
	} {
		require.True(t, strings.HasSuffix(lines[i+1], "  "+want), "change %d: %s", i+1, lines[i+1])
	}

	code, out, errOut = f.run(t, "limits", "history", "plan:free", "--json")
	require.Equal(t, cli.ExitOK, code, errOut)
	var got []pgqueue.LimitRecord
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 3)
	for i, n := range []int{2, 3, 2} {
		require.Len(t, got[i].Changed, n, "change %d: %s", i+1, out)
	}
	require.Contains(t, out, `"changed":[{"field":"allowances","before":50000,"after":70000,"before_allowance":{"meter":"tokens","amount":50000,`+
		`"calendar":"day","zone":"America/Los_Angeles","on_spent":"refuse"},"after_allowance":{"meter":"tokens","amount":70000,"calendar":"day",`+
		`"zone":"America/Los_Angeles","on_spent":"wait"}}`)
}

// The usage names limits history and its flags.
func TestCLI_UsageNamesLimitsHistory(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(context.Background(), "", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, "| history KEY [--since D] [--max N]")
	code, out, _ = runCLI(context.Background(), "", "limits", "history", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, "-since")
	require.Contains(t, out, "-max")
}
