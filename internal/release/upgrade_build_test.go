package release_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// envUpgradeFrom names the git ref the rolling-upgrade test upgrades from, instead of the last
// release HEAD contains.
const envUpgradeFrom = "SLUICE_UPGRADE_FROM"

// previousRelease returns the ref to upgrade from and its commit: SLUICE_UPGRADE_FROM, else the last
// release HEAD contains as scripts/last-release.sh finds it (api/releases.txt, else the newest v*
// tag), the record the API check compares with. With none it skips the test (fails it under CI).
func previousRelease(t *testing.T, root string) (ref, commit string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Skip(t, "git is not on PATH")
	}
	if ref = os.Getenv(envUpgradeFrom); ref != "" {
		cmd := exec.Command("git", "rev-parse", "--verify", ref+"^{commit}")
		cmd.Dir = root
		out, err := cmd.Output()
		require.NoError(t, err, "%s=%q is not a commit", envUpgradeFrom, ref)
		return ref, strings.TrimSpace(string(out))
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "last-release.sh"))
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		testenv.Skip(t, "no release to upgrade from ("+strings.TrimSpace(stderr.String())+"); set "+envUpgradeFrom)
	}
	ref, commit, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	require.True(t, ok, "last-release.sh printed %q, not \"<version> <commit>\"", out)
	return ref, commit
}

// extractTree writes the tree of commit into a new directory and returns it.
func extractTree(t *testing.T, root, commit string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cmd := exec.Command("bash", "-o", "pipefail", "-c", `git archive "$1" | tar -x -C "$2"`, "extract", commit, dir)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git archive %s: %s", commit, out)
	return dir
}

// buildWorker builds testdata/upgradeworker against the Sluice tree at tree and returns the binary.
// The program lives in a module of its own beside the tree, which it replaces Sluice with: neither
// tree is written to, and each gets its own go.mod's dependencies. The module cache and the build
// cache are shared, so a build after the first is mostly a link.
func buildWorker(t *testing.T, tree, name string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "upgradeworker", "main.go"))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	gomod := "module upgradeworker\n\ngo 1.26\n\nrequire github.com/sluicehq/sluice v0.0.0\n\nreplace github.com/sluicehq/sluice => " + tree + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))
	if sum, err := os.ReadFile(filepath.Join(tree, "go.sum")); err == nil {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "worker")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build the %s worker against %s: %s", name, tree, out)
	t.Logf("built the %s worker in %s", name, time.Since(start).Round(100*time.Millisecond))
	return bin
}
