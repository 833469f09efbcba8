// Package pgbouncer starts a private PgBouncer in transaction mode (or session mode, on request) in
// front of a Postgres, for tests and benchmarks of Sluice behind a pooler. It runs the installed binary (Debian's pgbouncer
// package); PgBouncer refuses to run as root, so when the caller is root it runs as the postgres OS
// user through runuser, as internal/pgcluster runs the server.
package pgbouncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// Bouncer is a running PgBouncer.
type Bouncer struct {
	Dir  string // its temp dir: configuration and log
	Port int
	// URL connects through the pooler as backend's user to backend's database, with pgx's
	// default_query_exec_mode=exec (no prepared statements kept between transactions).
	URL string

	cmd *exec.Cmd
}

// Options are the pooler's settings.
type Options struct {
	// PoolSize is default_pool_size: server connections per database and user. Defaults to 20.
	PoolSize int
	// MaxClients is max_client_conn. Defaults to 2,000.
	MaxClients int
	// PoolMode is pool_mode: "transaction" or "session" (a server connection per client, for as
	// long as it is connected). Defaults to "transaction".
	PoolMode string
}

// Start starts a PgBouncer in transaction mode (unless opts.PoolMode) in front of backend (a postgres:// URL), stopped at
// the end of the test. Without the pgbouncer binary it skips the test, or fails it when CI is set.
func Start(t testing.TB, backend string, opts Options) *Bouncer {
	t.Helper()
	if _, err := binary(); err != nil {
		testenv.Skip(t, "no pgbouncer binary (Debian package pgbouncer)")
	}
	b, err := Run(backend, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b
}

// Run starts a PgBouncer in transaction mode in front of backend; Stop stops it. Benchmarks use it;
// tests use Start.
func Run(backend string, opts Options) (*Bouncer, error) {
	u, err := url.Parse(backend)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: backend URL: %w", err)
	}
	dir, err := os.MkdirTemp("", "sluice-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &Bouncer{Dir: dir}
	if err := b.start(u, opts); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

func (b *Bouncer) start(backend *url.URL, opts Options) error {
	asPostgres := os.Geteuid() == 0
	if err := os.Chmod(b.Dir, 0o755); err != nil {
		return err
	}
	if asPostgres {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("pgbouncer: running as root with no postgres OS user to run it as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(b.Dir, uid, gid); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	b.Port = port
	cfg := filepath.Join(b.Dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(b.config(backend, opts)), 0o644); err != nil {
		return err
	}
	bin, err := binary()
	if err != nil {
		return err
	}
	name, args := bin, []string{cfg}
	if asPostgres {
		name, args = "runuser", append([]string{"-u", "postgres", "--", bin}, args...)
	}
	b.cmd = exec.Command(name, args...)
	b.cmd.Dir = b.Dir
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- b.cmd.Wait() }()
	user := backend.User.Username()
	b.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d%s?sslmode=disable&default_query_exec_mode=exec", user, port, backend.Path)
	return b.waitReady(exited)
}

// waitReady waits until the pooler accepts connections, or it exits, or a minute passes.
func (b *Bouncer) waitReady(exited <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var d net.Dialer
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", b.Port))
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("pgbouncer exited at start: %v\n%s", err, b.Log(20))
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("pgbouncer: not accepting connections after a minute\n%s", b.Log(20)), err)
		case <-time.After(backoff):
		}
	}
}

// config is the pooler's configuration: every database of backend's host, as backend's user, in
// transaction mode, with no authentication between the test and the pooler.
func (b *Bouncer) config(backend *url.URL, opts Options) string {
	host, port := backend.Hostname(), backend.Port()
	if port == "" {
		port = "5432"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "[databases]\n* = host=%s port=%s user=%s\n\n[pgbouncer]\n", host, port, backend.User.Username())
	fmt.Fprintf(&s, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n", b.Port)
	fmt.Fprintf(&s, "auth_type = any\npool_mode = %s\ndefault_pool_size = %d\nmax_client_conn = %d\n",
		cmp.Or(opts.PoolMode, "transaction"), cmp.Or(opts.PoolSize, 20), cmp.Or(opts.MaxClients, 2000))
	fmt.Fprintf(&s, "ignore_startup_parameters = extra_float_digits\nlogfile = %s\npidfile = %s\n",
		filepath.Join(b.Dir, "pgbouncer.log"), filepath.Join(b.Dir, "pgbouncer.pid"))
	return s.String()
}

// Log returns the tail of the pooler's log.
func (b *Bouncer) Log(lines int) string {
	data, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// Stop stops the pooler and removes its directory.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		// SIGINT is PgBouncer's "safe shutdown"; runuser passes it on. A kill follows, for a pooler
		// that does not exit (it waits for clients otherwise).
		_ = b.cmd.Process.Signal(os.Interrupt)
		if data, err := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
		_ = b.cmd.Process.Kill()
	}
	_ = os.RemoveAll(b.Dir)
}

// binary returns the path of pgbouncer: on PATH, else where Debian installs it (/usr/sbin, which a
// non-root PATH may leave out).
func binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return filepath.Abs(p)
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
		return "", fmt.Errorf("pgbouncer: no pgbouncer binary on PATH or in /usr/sbin (Debian package pgbouncer): %w", err)
	}
	return "/usr/sbin/pgbouncer", nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
