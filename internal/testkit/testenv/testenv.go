// Package testenv is what every test package of the module shares about its environment: skipping
// a test whose dependency (Postgres, the Temporal CLI) is missing, and a TestMain that says how many
// tests were skipped and why, then checks that no goroutine outlived the tests.
//
// Plain `go test ./...` shows nothing of a passing package but its "ok" line, so a package whose
// tests all skipped looks exactly like one whose tests all passed. Main therefore writes its summary
// past go test's buffering (see [Main]), and a run that skipped tests is kept out of go test's result
// cache, so that the summary is printed on every run, not only the first.
package testenv

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// CI reports whether the tests run under CI (the CI variable is set): there a missing dependency
// fails a test instead of skipping it, so that CI never passes by running nothing.
func CI() bool { return os.Getenv("CI") != "" }

// The command that runs the whole suite with everything it needs.
const runCommand = "make test"

var (
	mu      sync.Mutex
	skipped = map[string]map[string]bool{} // reason -> top-level test names
)

// Skip skips t because a dependency is missing, counting it under reason for the package's summary
// line. Under CI it fails t instead. reason is short and names what is missing, for example
// "TEST_DATABASE_URL is not set".
func Skip(t testing.TB, reason string) {
	t.Helper()
	if CI() {
		t.Fatalf("%s; CI must run every test: run them with `%s`", reason, runCommand)
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	mu.Lock()
	if skipped[reason] == nil {
		skipped[reason] = map[string]bool{}
	}
	skipped[reason][name] = true
	mu.Unlock()
	markUncacheable()
	t.Skipf("%s; run the tests with `%s`", reason, runCommand)
}

// Main runs the package's tests and ends the process as [Exit] does. It does not return.
func Main(m *testing.M, ignore ...goleak.Option) {
	Exit(m.Run(), ignore...)
}

// Exit ends a TestMain that ran m.Run itself (to set up and tear down around it) with m.Run's code:
// it prints the skip summary and, when every test passed, fails the run if goroutines are left
// behind (ignoring those named in ignore, besides the known ones of pgxpool). It does not return.
func Exit(code int, ignore ...goleak.Option) {
	if line := Summary(testPackage()); line != "" {
		printPastGoTest(line)
	}
	if code == 0 {
		opts := append([]goleak.Option{
			// pgxpool's health check ends shortly after Close, on its own ticker.
			goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		}, ignore...)
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Summary returns the line that says how many tests of pkg were skipped and why, or "" when none
// was.
func Summary(pkg string) string {
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) == 0 {
		return ""
	}
	total := map[string]bool{}
	var reasons []string
	for reason, names := range skipped {
		for n := range names {
			total[n] = true
		}
		reasons = append(reasons, fmt.Sprintf("%s (%d)", reason, len(names)))
	}
	sort.Strings(reasons)
	noun := "tests"
	if len(total) == 1 {
		noun = "test"
	}
	return fmt.Sprintf("%s: %d %s skipped: %s; run them with `%s`",
		pkg, len(total), noun, strings.Join(reasons, ", "), runCommand)
}

// testPackage returns the import path of the package whose TestMain is on the stack, without the
// _test suffix of an external test package.
func testPackage() string {
	pcs := make([]uintptr, 16)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if dir, base := filepath.Split(f.Function); strings.HasSuffix(base, ".TestMain") {
			// github.com/sluicehq/sluice/pgqueue_test.TestMain
			return dir + strings.TrimSuffix(strings.TrimSuffix(base, ".TestMain"), "_test")
		}
		if !more {
			return "sluice"
		}
	}
}

// printPastGoTest writes line where the person running go test sees it. go test hides the output
// of a passing package unless -v is given, so the line goes to the terminal when there is one, else
// to go test's own standard output when that is a pipe (a CI log, `| tee`), and else to this
// process's standard output, which -v shows. go test's output is never written to when it is a
// regular file: a second writer at another offset would overwrite its lines.
func printPastGoTest(line string) {
	line += "\n"
	if f, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		_, _ = io.WriteString(f, line)
		_ = f.Close()
		return
	}
	parent := fmt.Sprintf("/proc/%d/fd/1", os.Getppid())
	if fi, err := os.Stat(parent); err == nil && fi.Mode()&(os.ModeNamedPipe|os.ModeCharDevice) != 0 && isGoTest(os.Getppid()) {
		if f, err := os.OpenFile(parent, os.O_WRONLY, 0); err == nil {
			_, _ = io.WriteString(f, line)
			_ = f.Close()
			return
		}
	}
	_, _ = io.WriteString(os.Stdout, line)
}

// isGoTest reports whether process pid is the go command, which runs test binaries directly.
func isGoTest(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && filepath.Base(exe) == "go"
}

// markUncacheable keeps this run's result out of go test's cache. go test does not cache a result
// when the test opened a file of the module modified within the last two seconds (cmd/go's
// modTimeCutoff; files outside the module are not looked at), so a run that skipped opens a marker
// it has just touched, in the module's bin/, which is ignored by git and holds only build outputs.
// Without this, the next `go test ./...` would print "ok (cached)" and not say that tests were
// skipped. Nothing is done where the module cannot be written (the module cache).
func markUncacheable() {
	root, err := moduleRoot()
	if err != nil {
		return
	}
	dir := filepath.Join(root, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	path := filepath.Join(dir, ".testenv-skipped")
	if err := os.WriteFile(path, []byte("written by internal/testenv when a test skips\n"), 0o644); err != nil {
		return
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	if f, err := os.Open(path); err == nil {
		_ = f.Close()
	}
}

// moduleRoot returns the directory of the go.mod above the working directory (a test runs in its
// package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// Logger returns a logger that writes to t.Log, so that logs show only for a failing test (or with
// -v), beside the test they belong to. Lines logged after the test has finished (by a goroutine that
// outlived it) go to standard error with the test's name, since t.Log would panic then.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.finish) // registered first, so run after the cleanups that stop workers
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) finish() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := strings.TrimSuffix(string(p), "\n")
	if w.done {
		fmt.Fprintf(os.Stderr, "%s (after it ended): %s\n", w.t.Name(), line)
		return len(p), nil
	}
	w.t.Log(line)
	return len(p), nil
}
