package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixture is a schema with live tickets: openai (a line of 5, 2 of them running) and a tenant cap.
type fixture struct {
	q   *store.Queue
	url string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	ctx := context.Background()
	q := testdb.Engine(t, pgqueue.Options{})
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 2, RequestsPerSecond: 10, TokensPerMinute: 60_000},
		throttle.Limit{Key: "tenant:acme", MaxConcurrent: 5}))
	for i, p := range []int{5, 1, 3, 2, 4} {
		_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Cost: int64(100 * (i + 1)),
			Priority: p, Owner: "worker-a", Namespace: "default", WorkflowID: "summarize-" + string(rune('a'+i)),
			ActivityType: "Summarize", FairnessKey: "acme", Attempt: 1})
		require.NoError(t, err)
	}
	res, err := q.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	return fixture{q: q, url: testdb.URL(t)}
}

// run runs the command with the fixture's database and schema and returns its exit code and outputs.
func (f fixture) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(context.Background(), f.url, append([]string{"--schema", f.q.Schema()}, args...)...)
}

func runCLI(ctx context.Context, url string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cli.Run(ctx, args, cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}})
	return code, out.String(), errOut.String()
}

// varying are the parts of the output that move with the clock: durations and instants.
var varying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`), "<time>"},
	{regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?(ms|s)\b`), "<dur>"},
	{regexp.MustCompile(` {2,}`), "  "}, // the columns' widths follow the durations' lengths
}

func golden(t *testing.T, name, got, schema string) {
	t.Helper()
	got = strings.ReplaceAll(got, schema, "<schema>")
	for _, v := range varying {
		got = v.re.ReplaceAllString(got, v.with)
	}
	exactGolden(t, name, got)
}

func TestCLI_ReadsAndSteers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status"}},
		{"status-key", []string{"status", "openai"}},
		{"tickets", []string{"tickets", "openai"}},
		{"limits-get", []string{"limits", "get"}},
		{"migrate-status", []string{"migrate", "status"}},
	} {
		code, out, errOut := f.run(t, c.args...)
		require.Equal(t, cli.ExitOK, code, "%v: %s", c.args, errOut)
		golden(t, c.name, out, f.q.Schema())
	}

	var st []map[string]any
	code, out, _ := f.run(t, "status", "--json", "openai")
	require.Equal(t, cli.ExitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st, 1)
	require.EqualValues(t, 3, st[0]["queued"])
	require.EqualValues(t, 2, st[0]["running"])
	require.EqualValues(t, 2, st[0]["requests_last_minute"])
	require.EqualValues(t, 600, st[0]["tokens_last_minute"])
	require.EqualValues(t, 600, st[0]["state"].(map[string]any)["inflight_tokens"])
	require.Equal(t, "concurrency", st[0]["head_wait_reason"])
	require.NotContains(t, st[0]["state"], "paused_until", "never paused")

	code, out, errOut := f.run(t, "limits", "set", "openai", "--max-concurrent", "3", "--tpm", "90000")
	require.Equal(t, cli.ExitOK, code, errOut)
	golden(t, "limits-set", out, f.q.Schema())
	l, err := f.q.Limit(ctx, "openai")
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "openai", MaxConcurrent: 3, RequestsPerSecond: 10, Burst: 10, TokensPerMinute: 90_000, TokenBurst: 90_000}, l)

	code, _, errOut = f.run(t, "limits", "set", "anthropic", "--create", "--rps", "5", "--burst", "2")
	require.Equal(t, cli.ExitOK, code, errOut)
	l, err = f.q.Limit(ctx, "anthropic")
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "anthropic", RequestsPerSecond: 5, Burst: 2}, l)
	code, _, errOut = f.run(t, "limits", "set", "anthropic", "--itpm", "400000", "--otpm", "80000", "--output-token-burst", "8000")
	require.Equal(t, cli.ExitOK, code, errOut)
	l, err = f.q.Limit(ctx, "anthropic")
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "anthropic", RequestsPerSecond: 5, Burst: 2, InputTokensPerMinute: 400_000, InputTokenBurst: 400_000,
		OutputTokensPerMinute: 80_000, OutputTokenBurst: 8_000}, l, "the input and output budgets, the other fields kept")

	code, _, errOut = f.run(t, "pause", "openai", "--for", "10m")
	require.Equal(t, cli.ExitOK, code, errOut)
	ls, err := f.q.LimitStatus(ctx, "openai")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), ls.State.PausedUntil, time.Minute, "paused for 10 minutes on the database's clock")
	code, out, _ = f.run(t, "resume", "openai", "--json")
	require.Equal(t, cli.ExitOK, code)
	require.NotContains(t, out, `"paused_until"`, "a pause lifted is none")
}

// Every bad input gets a message naming the value, its exit code, and changes nothing.
func TestCLI_BadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	before, err := f.q.Status(ctx)
	require.NoError(t, err)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{[]string{"status", "nope"}, cli.ExitNotFound, `unknown limit: ["nope"]`},
		{[]string{"tickets", "nope"}, cli.ExitNotFound, `"nope"`},
		{[]string{"tickets", "openai", "--max", "0"}, cli.ExitUsage, `invalid value "0" for flag -max: must be a whole number from 1 to 2147483647, got "0"`},
		{[]string{"tickets", "openai", "--max", "99999999999999999999"}, cli.ExitUsage, `must be a whole number from 1 to 2147483647, got "99999999999999999999"`},
		{[]string{"limits", "set", "openai", "--max-concurrent", "2147483648"}, cli.ExitUsage, `invalid value "2147483648" for flag -max-concurrent: must be a whole number from 0 to 2147483647, got "2147483648"`},
		{[]string{"limits", "set", "openai", "--max-inflight-tokens", "9223372036854775808"}, cli.ExitUsage, `invalid value "9223372036854775808" for flag -max-inflight-tokens: must be a whole number from 0 to 9223372036854775807, got "9223372036854775808"`},
		{[]string{"limits", "set", "openai", "--rps", "1e13"}, cli.ExitUsage, `invalid value "1e13" for flag -rps: must be a number from 0 to 1000000000000, got "1e13"`},
		{[]string{"status", "--watch", "1ms"}, cli.ExitUsage, "--watch must be at least 100ms, got 1ms"},
		{[]string{"status", "--watch", "0s"}, cli.ExitUsage, "--watch must be a positive interval such as 2s, got 0s (leave --watch out to print once)"},
		{[]string{"tickets", "openai", "--watch", "-2s"}, cli.ExitUsage, "--watch must be a positive interval such as 2s, got -2s"},
		{[]string{"explain", "1", "--watch", "0s"}, cli.ExitUsage, "--watch must be a positive interval such as 2s, got 0s"},
		{[]string{"status", "--limit", "0"}, cli.ExitUsage, `invalid value "0" for flag -limit: must be a whole number from 1 to 2147483647, got "0"`},
		{[]string{"status", "openai", "--prefix", "tenant:"}, cli.ExitUsage, `status takes KEYs or --prefix, not both: got ["openai"] and --prefix "tenant:"`},
		{[]string{"limits", "set", "openai", "--rps", "-1"}, cli.ExitUsage, `invalid value "-1" for flag -rps: must be a number from 0 to 1000000000000, got "-1"`},
		{[]string{"limits", "set", "openai", "--tpm", "NaN"}, cli.ExitUsage, `invalid value "NaN" for flag -tpm: must be a number from 0 to 1000000000000, got "NaN"`},
		{[]string{"limits", "set", "openai", "--max-concurrent", "1.5"}, cli.ExitUsage, `got "1.5"`},
		{[]string{"limits", "set", "tenant:acme", "--burst", "3"}, cli.ExitUsage, "--burst must be 0 when --rps is not set, got 3"},
		{[]string{"limits", "set", "openai"}, cli.ExitUsage, "give at least one of"},
		{[]string{"limits", "set", "nope", "--rps", "1"}, cli.ExitNotFound, `"nope" (add --create to create it)`},
		{[]string{"limits", "set", "   ", "--max-concurrent", "1", "--create"}, cli.ExitUsage, `Key must not be blank, got "   "`},
		{[]string{"limits", "set", "openai ", "--max-concurrent", "1", "--create"}, cli.ExitUsage, `Key must not begin or end with a space, got "openai "`},
		{[]string{"limits", "set", "tenant:acme", "--input-token-burst", "3"}, cli.ExitUsage, "--input-token-burst must be 0 when --itpm is not set, got 3"},
		{[]string{"limits", "set", "tenant:acme", "--max-concurrent", "0"}, cli.ExitUsage, "sets none of --max-concurrent, --rps, --tpm, --itpm, --otpm, --max-inflight-tokens"},
		{[]string{"limits", "set", "tenant:acme", "--max-concurrent", "0"}, cli.ExitUsage, "; to remove the key, run: sluice limits delete tenant:acme --yes"},
		{[]string{"limits", "set", "openai", "--burst", "0"}, cli.ExitUsage, `invalid value "0" for flag -burst: must be >= 1, got "0"`},
		{[]string{"limits", "set", "openai", "--token-burst", "0"}, cli.ExitUsage, `invalid value "0" for flag -token-burst: must be >= 1, got "0"`},
		{[]string{"limits", "frob"}, cli.ExitUsage, "limits takes get, set, history or delete"},
		{[]string{"status", "--watch", "2"}, cli.ExitUsage, `invalid value "2" for flag -watch: must be a duration: a number and a unit (ms, s, m, h), such as 500ms, 2s or 1m30s, got "2"`},
		{[]string{"serve", "--refresh", "0"}, cli.ExitUsage, "--refresh must be a positive duration, got 0s (leave the flag out for its default)"},
		{[]string{"serve", "--step", "0s"}, cli.ExitUsage, "--step must be a positive duration, got 0s"},
		{[]string{"serve", "--window", "2h"}, cli.ExitUsage, "--window must be from --step (10s) to 1h0m0s, got 2h0m0s"},
		{[]string{"serve", "--refresh", "1ms"}, cli.ExitUsage, "--refresh must be at least 100ms, got 1ms"},
		{[]string{"serve", "--temporal-ui", "http://localhost:8233/{workflow}"}, cli.ExitUsage, "--temporal-ui has an unknown placeholder {workflow}"},
		{[]string{"pause", "openai"}, cli.ExitUsage, "give --for D (e.g. 10m) or --until TIME"},
		{[]string{"pause", "openai", "--for", "-5m"}, cli.ExitUsage, "got -5m0s"},
		{[]string{"pause", "nope", "--for", "1m"}, cli.ExitNotFound, `"nope"`},
		{[]string{"resume", "nope"}, cli.ExitNotFound, `"nope"`},
		{[]string{"migrate", "sideways"}, cli.ExitUsage, `migrate takes up or status, got ["sideways"]`},
	} {
		code, _, errOut := f.run(t, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
		t.Logf("sluice %s -> %d: %s", strings.Join(c.args, " "), code, strings.TrimSpace(errOut))
	}
	after, err := f.q.Status(ctx)
	require.NoError(t, err)
	for i := range before {
		before[i].Now, after[i].Now = time.Time{}, time.Time{}
	}
	require.Equal(t, before, after, "no bad input changed anything")

	for _, c := range []struct {
		url  string
		args []string
		code int
		msg  string
	}{
		{f.url, []string{"--schema", "nosuch_schema", "status"}, cli.ExitNotFound, `schema "nosuch_schema" in 127.0.0.1:5432/test has no Sluice tables (run: sluice migrate up --schema nosuch_schema)`},
		{f.url, []string{"--schema", "bad;name", "status"}, cli.ExitUsage, `--schema "bad;name"`},
		{"postgres://postgres:s3cret@127.0.0.1:1/x?connect_timeout=5", []string{"status"}, cli.ExitFailed, "cannot reach the database at 127.0.0.1:1/x"},
		{"http://nope", []string{"status"}, cli.ExitUsage, "--database: not a Postgres URL"},
		{"", []string{"status"}, cli.ExitUsage, "no database: set DATABASE_URL or pass --database"},
	} {
		code, _, errOut := runCLI(ctx, c.url, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg)
		require.NotContains(t, errOut, "s3cret", "the password is not printed")
		helpCode, help, _ := runCLI(ctx, c.url, "status", "-h")
		require.Equal(t, cli.ExitOK, helpCode)
		require.NotContains(t, help, "s3cret", "nor by -h")
		t.Logf("sluice %s -> %d: %s", strings.Join(c.args, " "), code, strings.TrimSpace(errOut))
	}
}

// frames is an output that cancels its context once it has seen n lines.
type frames struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *frames) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if bytes.Count(w.buf.Bytes(), []byte("\n")) >= w.n {
		w.cancel()
	}
	return len(p), nil
}

// --watch refreshes until interrupted; with --json each refresh is one line of JSON.
func TestCLI_Watch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watchCtx, stop := context.WithCancel(ctx)
	out := &frames{n: 3, cancel: stop}
	code := cli.Run(watchCtx, []string{"--database", f.url, "--schema", f.q.Schema(), "status", "--watch", "100ms", "--json"},
		cli.Env{Stdout: out, Stderr: os.Stderr, Getenv: func(string) string { return "" }})
	require.Equal(t, cli.ExitOK, code)
	require.NoError(t, ctx.Err(), "the watch ended at the interrupt, not the deadline")
	sc := bufio.NewScanner(&out.buf)
	lines := 0
	for sc.Scan() {
		var st []map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &st))
		require.Len(t, st, 2)
		lines++
	}
	require.GreaterOrEqual(t, lines, 3)

	// For people: screen codes on a terminal only, never into a pipe.
	for _, terminal := range []bool{false, true} {
		watchCtx, stop := context.WithCancel(ctx)
		out := &frames{n: 12, cancel: stop}
		code := cli.Run(watchCtx, []string{"--database", f.url, "--schema", f.q.Schema(), "status", "--watch", "100ms"},
			cli.Env{Stdout: out, Stderr: os.Stderr, Getenv: func(string) string { return "" }, Terminal: terminal})
		require.Equal(t, cli.ExitOK, code)
		require.NoError(t, ctx.Err(), "the watch ended at the interrupt, not the deadline")
		require.Equal(t, terminal, strings.Contains(out.buf.String(), "\x1b["), "screen codes when Terminal is %v", terminal)
	}
}

func TestCLI_MigrateUp(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	schema := testdb.NewSchemaName()
	pool := testdb.Pool(t)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	code, out, errOut := runCLI(context.Background(), url, "migrate", "up", "--schema", schema)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Equal(t, "schema "+schema+": applied [1 2 3 4 5 6 7 8 9 10 11 12 13 14], now at version 14\n", out)
	code, out, _ = runCLI(context.Background(), url, "migrate", "up", "--schema", schema)
	require.Equal(t, cli.ExitOK, code)
	require.Equal(t, "schema "+schema+" is current at version 14\n", out)
	code, out, _ = runCLI(context.Background(), url, "--json", "migrate", "status", "--schema", schema)
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, `"version":5`)
	code, out, _ = runCLI(context.Background(), url, "status", "--schema", schema)
	require.Equal(t, cli.ExitOK, code)
	require.Equal(t, 1, strings.Count(out, "\n"), "a header and no limits")
}

// lineWriter hands each line written to it to a channel.
type lineWriter struct{ lines chan string }

func (w lineWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		w.lines <- l
	}
	return len(p), nil
}

// serve serves the dashboard until interrupted, on the address it was given.
func TestCLI_Serve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	out := lineWriter{lines: make(chan string, 10)}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(serveCtx, []string{"--database", f.url, "--schema", f.q.Schema(), "serve", "--addr", "127.0.0.1:0"},
			cli.Env{Stdout: out, Stderr: os.Stderr, Getenv: func(string) string { return "" }})
	}()
	var line string
	select {
	case line = <-out.lines:
	case code := <-done:
		t.Fatalf("serve exited with %d", code)
	case <-ctx.Done():
		t.Fatal("serve never said where it listens")
	}
	require.Contains(t, line, "(read-only)")
	url := regexp.MustCompile(`http://[^ ]+/`).FindString(line)
	require.NotEmpty(t, url, line)
	resp, err := http.Get(url + "api/status?key=openai&key=tenant:acme")
	require.NoError(t, err)
	var st struct {
		Keys []struct {
			Configured struct {
				Key string `json:"key"`
			} `json:"configured"`
			Queued int64 `json:"queued"`
		} `json:"keys"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	resp.Body.Close()
	require.Len(t, st.Keys, 2)
	require.Equal(t, int64(3), st.Keys[0].Queued)
	stop()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code)
	case <-ctx.Done():
		t.Fatal("serve did not stop at the interrupt")
	}
	code, _, errOut := f.run(t, "serve", "--addr", "nonsense")
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, errOut, `--addr "nonsense"`)
}

// A key that reads like a flag is a key after --; a workflow ID with a terminal escape is quoted; a
// schema a migration behind is refused with what to run.
func TestCLI_Edges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	require.NoError(t, f.q.UpsertLimits(ctx, throttle.Limit{Key: "-x", MaxConcurrent: 1}))
	code, out, errOut := f.run(t, "pause", "--for", "1m", "--", "-x")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "-x ")
	_, err := f.q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"-x"}, Owner: "o", WorkflowID: "evil\x1b[2Jid", ActivityType: "A"})
	require.NoError(t, err)
	code, out, _ = f.run(t, "tickets", "--", "-x")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, `"evil\x1b[2Jid"`)
	require.NotContains(t, out, "\x1b")

	_, err = f.q.Pool().Exec(ctx, `DELETE FROM `+f.q.Schema()+`.sluice_migration WHERE version >= 11`)
	require.NoError(t, err)
	code, _, errOut = f.run(t, "status")
	require.Equal(t, cli.ExitNotFound, code)
	require.Contains(t, errOut, "is at version 10 and lacks migration 11 (allowances): run sluice migrate up")
}
