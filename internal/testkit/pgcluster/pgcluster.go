// Package pgcluster starts a private, throwaway PostgreSQL cluster from the installed binaries, for
// tests that must stop, restart or kill the database under Sluice. It does what
// scripts/with-postgres.sh does for its case c: initdb into a temp dir, a free port on 127.0.0.1,
// and, when the test runs as root, everything run as the postgres OS user through runuser.
package pgcluster

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// Cluster is a running private cluster.
type Cluster struct {
	BinDir  string
	Dir     string // temp dir: data, socket and log
	DataDir string
	Port    int
	// URL connects as the superuser postgres to database postgres, over TCP.
	URL string

	asPostgres bool // run the server binaries through runuser -u postgres
}

// BinDir returns the directory holding initdb and pg_ctl: SLUICE_PG_BINDIR if set, else the newest
// /usr/lib/postgresql/*/bin, else pg_config --bindir, else the directory of initdb on PATH.
func BinDir() (string, error) {
	ok := func(d string) bool {
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("SLUICE_PG_BINDIR"); d != "" {
		if ok(d) {
			return d, nil
		}
		return "", fmt.Errorf("pgcluster: SLUICE_PG_BINDIR=%s holds no initdb, pg_ctl and postgres", d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) < versionOf(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if ok(dirs[i]) {
			return dirs[i], nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); ok(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && ok(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("pgcluster: no PostgreSQL server binaries found (set SLUICE_PG_BINDIR, or apt-get install -y postgresql)")
}

func versionOf(dir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
	return v
}

// ErrUnavailable wraps why no private cluster can be started on this machine: no server binaries, or
// no postgres OS user to run them as root. Start skips the test on it.
var ErrUnavailable = errors.New("pgcluster: unavailable")

// DefaultMaxConnections is the cluster's max_connections when Options.MaxConnections is 0.
const DefaultMaxConnections = 200

// Options configures New. The zero value is a cluster as Start makes it.
type Options struct {
	// MaxConnections is the server's max_connections. Defaults to DefaultMaxConnections.
	MaxConnections int
	// Durable keeps PostgreSQL's defaults fsync, synchronous_commit and full_page_writes on, as
	// every user runs it (the benchmark measures there). Without it the cluster turns the three off,
	// for the tests' speed: a crash of the machine may lose or corrupt it, which a throwaway cluster
	// does not mind.
	Durable bool
	// Conf are more lines for postgresql.conf, after New's own ("shared_preload_libraries =
	// 'pg_stat_statements'").
	Conf []string
}

// settings returns the lines New appends to postgresql.conf for these options on port, with the
// socket in dir.
func (o Options) settings(port int, dir string) string {
	conf := fmt.Sprintf("\n# written by internal/pgcluster\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = %d\n",
		port, dir, o.MaxConnections)
	if o.Durable {
		conf += "fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n"
	} else {
		conf += "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
	}
	for _, l := range o.Conf {
		conf += l + "\n"
	}
	return conf
}

// Start initialises and starts a cluster, stopped and removed at the end of the test. Without
// PostgreSQL binaries it skips the test, or fails it when CI is set.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := New(Options{})
	switch {
	case errors.Is(err, ErrUnavailable):
		testenv.Skip(t, err.Error())
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// New initialises and starts a cluster for a caller outside a test (the benchmark); Close stops it and
// removes its directory. On error nothing is left behind. The error wraps ErrUnavailable when the
// machine cannot run one.
func New(opts Options) (*Cluster, error) {
	opts.MaxConnections = cmp.Or(opts.MaxConnections, DefaultMaxConnections)
	bin, err := BinDir()
	if err != nil {
		return nil, fmt.Errorf("%w: no PostgreSQL server binaries (%v)", ErrUnavailable, err)
	}
	c := &Cluster{BinDir: bin, asPostgres: os.Geteuid() == 0}
	// Not t.TempDir: its parent is private to this user, and the server may run as postgres.
	dir, err := os.MkdirTemp("", "sluice-pgcluster-")
	if err != nil {
		return nil, err
	}
	c.Dir, c.DataDir = dir, filepath.Join(dir, "data")
	if err := c.initAndStart(opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close stops the server at once (immediate mode, then a kill of the postmaster if it lingers) and
// removes the cluster's directory. It is safe to call twice.
func (c *Cluster) Close() {
	_ = c.run("stop", "-D", c.DataDir, "-m", "immediate", "-w", "-t", "30")
	if pid, err := c.PostmasterPID(); err == nil && pid > 0 {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
	_ = os.RemoveAll(c.Dir)
}

// initAndStart runs initdb in c.Dir and starts the server on a free port, trying a few ports.
func (c *Cluster) initAndStart(opts Options) error {
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		return err
	}
	if c.asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("%w: running as root with no postgres OS user to run a private cluster as (%v)", ErrUnavailable, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(c.Dir, uid, gid); err != nil {
			return err
		}
	}
	initdb := []string{"-D", c.DataDir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"}
	if !opts.Durable {
		initdb = append(initdb, "--no-sync")
	}
	if out, err := c.command("initdb", initdb...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return err
		}
		conf := opts.settings(port, c.Dir)
		// postgresql.conf belongs to the server's user: append through it. A later line wins, so a
		// retry's port replaces the last one's.
		cmd := c.command("sh", "-c", `cat >>"$1"`, "_", filepath.Join(c.DataDir, "postgresql.conf"))
		cmd.Stdin = strings.NewReader(conf)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pgcluster: write postgresql.conf: %v\n%s", err, out)
		}
		c.Port = port
		if lastErr = c.Start(); lastErr == nil {
			c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return nil
		}
		_ = c.run("stop", "-D", c.DataDir, "-m", "immediate", "-w")
	}
	return fmt.Errorf("pgcluster: could not start PostgreSQL: %v", lastErr)
}

// PostmasterPID returns the process ID of the running server, from postmaster.pid.
func (c *Cluster) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
}

// Start starts the (stopped) server and waits until it accepts connections.
func (c *Cluster) Start() error {
	return c.run("start", "-D", c.DataDir, "-l", filepath.Join(c.Dir, "postgres.log"), "-w", "-t", "60")
}

// Stop stops the server with the given shutdown mode (smart, fast, immediate) and waits.
func (c *Cluster) Stop(mode string) error {
	return c.run("stop", "-D", c.DataDir, "-m", mode, "-w", "-t", "60")
}

// Log returns the tail of the server log.
func (c *Cluster) Log(lines int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "postgres.log"))
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func (c *Cluster) run(args ...string) error {
	var out bytes.Buffer
	cmd := c.command("pg_ctl", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgcluster: pg_ctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// command runs a server binary (or sh) as the cluster's OS user, from the temp dir, which that user
// can enter (it may not be able to enter the test's working directory).
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	if name != "sh" {
		name = filepath.Join(c.BinDir, name)
	}
	var cmd *exec.Cmd
	if c.asPostgres {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.Dir = c.Dir
	return cmd
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	// Give the kernel a moment before the server binds it.
	time.Sleep(10 * time.Millisecond)
	return ln.Addr().(*net.TCPAddr).Port, nil
}
