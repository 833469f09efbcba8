package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/cmd/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// sluice gate refuses bad flags and route files with exit 2, naming the flag and the value, before
// it connects to anything.
func TestGate_BadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gate", "--hold", "0s"}, "--hold must be a positive duration, got 0s"},
		{[]string{"gate", "--check-interval", "-1s"}, "--check-interval must be a positive duration, got -1s"},
		{[]string{"gate", "--stop-timeout", "-1s"}, "--stop-timeout must be >= 0, got -1s"},
		{[]string{"gate", "--task-queue", ""}, "--task-queue must not be empty"},
		{[]string{"gate", "extra"}, `gate takes no arguments, got ["extra"]`},
		{[]string{"gate", "--routes", filepath.Join(dir, "nosuch.json")}, "--routes: open"},
		{[]string{"gate", "--routes", write("list.json", `["openai"]`)}, "not a JSON object of routes"},
		{[]string{"gate", "--routes", write("unknown.json", `{"openai": {"limitz": ["openai"]}}`)}, `unknown field "limitz"`},
		{[]string{"gate", "--prices", write("prices.json", `{"currency": 5}`)}, "--prices"},
	} {
		t.Run(strings.Join(tc.args[1:], " "), func(t *testing.T) {
			code, out, errOut := runCLI(context.Background(), "postgres://127.0.0.1:1/none", tc.args...)
			require.Equal(t, cli.ExitUsage, code, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, tc.want)
		})
	}
}

// sluice gate serves once it says so, refuses a route that names no limit as a usage error naming
// the flag, and stops at the context's end with exit 0.
func TestGate_Serves(t *testing.T) {
	t.Parallel()
	s, err := temporaltest.Start(context.Background())
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	t.Cleanup(s.Stop)
	url := testdb.URL(t)
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	dir := t.TempDir()

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"openai": {"limits": []}}`), 0o644))
	code, _, errOut := runCLI(context.Background(), url, "--schema", schema, "gate", "--address", s.Addr, "--routes", bad)
	require.Equal(t, cli.ExitUsage, code, errOut)
	require.Contains(t, errOut, `--routes["openai"].Limits must name 1 to 16 limits, got 0`)

	routes := filepath.Join(dir, "routes.json")
	require.NoError(t, os.WriteFile(routes, []byte(`{"openai": {"limits": ["openai"]}}`), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newLines()
	serving := out.match("sluice gate: serving")
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"--schema", schema, "gate", "--address", s.Addr, "--routes", routes,
			"--task-queue", "gate-" + schema, "--stop-timeout", "1s"},
			cli.Env{Stdout: out, Stderr: out, Getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return url
				}
				return ""
			}})
	}()
	select {
	case line := <-serving:
		require.Contains(t, line, `Acquire on "gate-`+schema+`"`)
	case code := <-done:
		t.Fatalf("sluice gate exited %d before serving:\n%s", code, out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("sluice gate did not serve:\n%s", out.String())
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, cli.ExitOK, code, out.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("sluice gate did not stop")
	}
}

// lines is an output that hands on the first line containing a text it is asked for.
type lines struct {
	mu    sync.Mutex
	buf   strings.Builder
	waits map[string]chan string
}

func newLines() *lines { return &lines{waits: map[string]chan string{}} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for text, ch := range l.waits {
		for _, line := range strings.Split(l.buf.String(), "\n") {
			if strings.Contains(line, text) {
				ch <- line
				delete(l.waits, text)
				break
			}
		}
	}
	return len(p), nil
}

// match returns a channel that receives the first line containing text.
func (l *lines) match(text string) <-chan string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan string, 1)
	l.waits[text] = ch
	return ch
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
