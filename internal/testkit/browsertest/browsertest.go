// Package browsertest drives a real headless Chromium for tests of web pages (Debian's chromium,
// which .ci/run installs when it is missing), through chromedp.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// Path returns the Chromium to drive: SLUICE_CHROMIUM when set, else the first of chromium,
// chromium-browser and google-chrome on PATH, else "".
func Path() string {
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New returns a browser tab's context, closed (with the browser) at the end of the test, and bounded
// by timeout. The test skips locally, and fails under CI, when there is no Chromium.
func New(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	path := Path()
	if path == "" {
		testenv.Skip(t, "no chromium on PATH (apt-get install chromium, or set SLUICE_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// KeepScreenshot writes png to bin/artifacts/name at the module's root when the module has a bin
// directory (make test builds into it), so that a run leaves the page as it was seen; elsewhere it
// does nothing.
func KeepScreenshot(t testing.TB, name string, png []byte) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			return
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "bin")); err != nil || !st.IsDir() {
		return
	}
	out := filepath.Join(dir, "bin", "artifacts", name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	t.Logf("screenshot: %s", out)
}
