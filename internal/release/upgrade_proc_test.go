package release_test

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// proc is a worker process of the rolling-upgrade test (testdata/upgradeworker).
type proc struct {
	name, version string // "O1", "old"
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	started       time.Time
	migrated      chan struct{} // closed at MIGRATED
	ready         chan struct{} // closed at READY
	exited        chan struct{} // closed once Wait has returned
	err           error         // Wait's, once exited

	mu          sync.Mutex
	migratedAt  time.Time
	applied     []int
	version0    int // the schema's version after its Migrate
	owner       string
	stopped     bool
	stderrLines []string
}

// startProc starts bin as worker name; it is killed and reaped at the end of the test.
func startProc(t *testing.T, bin, name, version string, env ...string) *proc {
	t.Helper()
	p := &proc{name: name, version: version, migrated: make(chan struct{}), ready: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.Env = append(os.Environ(), append(env, "UPGRADE_NAME="+name)...)
	p.cmd.Stdout = &testenv.LineWriter{Func: p.stdoutLine}
	p.cmd.Stderr = &testenv.LineWriter{Func: func(line string) {
		p.mu.Lock()
		p.stderrLines = append(p.stderrLines, line)
		p.mu.Unlock()
	}}
	stdin, err := p.cmd.StdinPipe()
	require.NoError(t, err)
	p.stdin = stdin
	p.started = time.Now()
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("worker %s (pid %d) not reaped 10s after SIGKILL", name, p.cmd.Process.Pid)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, line := range p.stderrLines {
			if i == 20 && !t.Failed() {
				t.Logf("worker %s stderr: ... %d more lines", name, len(p.stderrLines)-20)
				break
			}
			t.Logf("worker %s stderr: %s", name, line)
		}
	})
	return p
}

func (p *proc) stdoutLine(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case strings.HasPrefix(line, "MIGRATED "):
		p.migratedAt = time.Now()
		for f := range strings.FieldsSeq(strings.TrimPrefix(line, "MIGRATED ")) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "version":
				p.version0, _ = strconv.Atoi(v)
			case "applied":
				for s := range strings.SplitSeq(v, ",") {
					if n, err := strconv.Atoi(s); err == nil {
						p.applied = append(p.applied, n)
					}
				}
			}
		}
		close(p.migrated)
	case strings.HasPrefix(line, "OWNER "):
		p.owner = strings.TrimPrefix(line, "OWNER ")
	case line == "READY":
		close(p.ready)
	case line == "STOPPED":
		p.stopped = true
	}
}

// waitReady waits for READY; the worker has migrated by then.
func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("worker %s exited before it was ready: %v", p.name, p.err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker %s not ready after 2m", p.name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("worker %s (%s) ready: pid %d, owner %s; its Migrate applied %v, schema version %d, in %s",
		p.name, p.version, p.cmd.Process.Pid, p.owner, p.applied, p.version0, p.migratedAt.Sub(p.started).Round(time.Millisecond))
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("worker %s did not exit within 1m of SIGTERM", p.name)
	}
	require.NoError(t, p.err, "worker %s exits 0 after SIGTERM", p.name)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.True(t, p.stopped, "worker %s returned from w.Stop()", p.name)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill(t *testing.T) time.Time {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	at := time.Now()
	<-p.exited
	return at
}
