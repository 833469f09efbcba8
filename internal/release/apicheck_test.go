package release_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot returns the root of the Sluice checkout the test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	gomod := strings.TrimSpace(string(out))
	require.NotEmpty(t, gomod, "the test runs inside the module")
	return filepath.Dir(gomod)
}

// gitRepo is a throwaway git repository holding a module with one public package.
type gitRepo struct {
	t   *testing.T
	dir string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	r := &gitRepo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	r.write("go.mod", "module example.com/m\n\ngo 1.26\n")
	r.write("lib/lib.go", "// Package lib is public.\npackage lib\n\n// F is public.\nfunc F() int { return 1 }\n")
	r.write("internal/in/in.go", "// Package in is internal.\npackage in\n\n// G is internal.\nfunc G() int { return 2 }\n")
	r.write("samples/s/s.go", "// Package s is a sample's: not part of the API.\npackage s\n\n// S is a sample's.\nfunc S() int { return 4 }\n")
	r.commit("v1")
	return r
}

func (r *gitRepo) git(args ...string) {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "git %v: %s", args, out)
}

func (r *gitRepo) write(name, body string) {
	r.t.Helper()
	path := filepath.Join(r.dir, name)
	require.NoError(r.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(r.t, os.WriteFile(path, []byte(body), 0o644))
}

// head returns the full commit HEAD names.
func (r *gitRepo) head() string {
	r.t.Helper()
	cmd := exec.Command("git", "rev-parse", "HEAD")
	cmd.Dir = r.dir
	out, err := cmd.Output()
	require.NoError(r.t, err)
	return strings.TrimSpace(string(out))
}

func (r *gitRepo) commit(msg string) {
	r.t.Helper()
	r.git("add", "-A")
	r.git("commit", "-q", "-m", msg)
}

// check runs scripts/api-check.sh in the repository, with apidiff from the checkout's bin/ (built
// there once), and returns its exit code and output.
func (r *gitRepo) check(root string) (int, string) {
	r.t.Helper()
	cmd := exec.Command(filepath.Join(root, "scripts", "api-check.sh"))
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "APIDIFF_BIN="+filepath.Join(root, "bin"), "API_BASE=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(r.t, err, &ee, "api-check.sh: %s", out)
		code = ee.ExitCode()
	}
	return code, string(out)
}

// TestAPICheck runs the API check on a repository with a tag and a breaking change: it fails naming
// the change, passes once the change is accepted, ignores internal packages, passes on additions,
// and says so when no tag is reachable.
func TestAPICheck(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	root := repoRoot(t)
	r := newGitRepo(t)

	code, out := r.check(root)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "no release is known")

	// A release recorded in api/releases.txt is the base with no tag at all (a clone of a branch
	// carries none).
	r.write("api/releases.txt", "# releases\nv0.1.0 "+r.head()+"\n")
	r.commit("record v0.1.0")
	code, out = r.check(root)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "the public API is compatible with v0.1.0")

	// A tag that names the recorded version at another commit is refused: the records disagree.
	r.git("tag", "v0.1.0")
	code, out = r.check(root)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "but the tag v0.1.0 is at")
	r.git("tag", "-d", "v0.1.0")
	r.git("tag", "v0.1.0", "HEAD~1")

	// A compatible addition, and breaking changes in an internal package and under samples/: all pass.
	r.write("lib/more.go", "package lib\n\n// H is new.\nfunc H() int { return 3 }\n")
	r.write("internal/in/in.go", "// Package in is internal.\npackage in\n")
	r.write("samples/s/s.go", "// Package s is a sample's: not part of the API.\npackage s\n")
	r.commit("additions")
	code, out = r.check(root)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "./lib.H: added")
	require.Contains(t, out, "the public API is compatible with v0.1.0")

	// A breaking change to the public package fails, naming it.
	r.write("lib/lib.go", "// Package lib is public.\npackage lib\n\n// F is public.\nfunc F(x int) int { return x }\n")
	r.commit("break F")
	code, out = r.check(root)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "./lib.F: changed from func() int to func(int) int")

	// Accepted in api/incompatible.txt, it passes.
	r.write("api/incompatible.txt", "# accepted\n./lib.F: changed from func() int to func(int) int\n")
	r.commit("accept")
	code, out = r.check(root)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "but for the 1 incompatible change(s) accepted in api/incompatible.txt")

	// A newer release is the base from then on, even one only tagged: the accepted line no longer
	// matches anything.
	r.git("tag", "v0.2.0")
	code, out = r.check(root)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "no longer match a change")
}
