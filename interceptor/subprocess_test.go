package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// The environment of a worker subprocess: the test binary run with SLUICE_E2E_WORKER=1 is a worker
// process, not a test run (see runSubprocessWorker).
const (
	envWorker   = "SLUICE_E2E_WORKER"   // "1": act as a worker process
	envTemporal = "SLUICE_E2E_TEMPORAL" // Temporal frontend host:port
	envSchema   = "SLUICE_E2E_SCHEMA"   // Sluice schema, already migrated
	envQueue    = "SLUICE_E2E_QUEUE"    // Temporal task queue
	envName     = "SLUICE_E2E_NAME"     // the worker's name in the test (A, B, ...), part of its Identity
	// The database is TEST_DATABASE_URL (or DATABASE_URL), as for the tests.
)

// subprocessHold is how long each Double holds in a worker process: long enough that, with
// MaxConcurrent 3, most tickets of a fan-out wait queued.
const subprocessHold = 200 * time.Millisecond

// runSubprocessWorker, when SLUICE_E2E_WORKER=1, runs this test binary as a Sluice worker process
// until SIGTERM or SIGINT (a graceful w.Stop()), then returns true: TestMain then returns without
// running tests, and the process exits 0. It writes to stdout, one line each:
//
//	OWNER <owner>                               once the plugin exists
//	READY                                       once the worker has started
//	GOT <workflowID>/<activityID> attempt=<n>      when an activity task reaches the worker
//	TICKETED <workflowID>/<activityID> attempt=<n> once Sluice's ExecuteActivity has returned ErrResultPending
//	RAN <workflowID>/<activityID> attempt=<n>      when a Double starts to run
//	DONE <workflowID>/<activityID> attempt=<n>     when a Double returns its result
//	STOPPED                                     once w.Stop() has returned
//
// It exits 2 on a setup error, and 3 when its stdin closes: the parent test died without killing it.
func runSubprocessWorker() bool {
	if os.Getenv(envWorker) != "1" {
		return false
	}
	if err := subprocessWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice e2e worker:", err)
		os.Exit(2)
	}
	return true
}

func subprocessWorker() error {
	// The parent holds our stdin open while it lives; if it dies without killing us, go too.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "sluice e2e worker: stdin closed; the parent test is gone")
		os.Exit(3)
	}()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	addr, schema, queue, name := os.Getenv(envTemporal), os.Getenv(envSchema), os.Getenv(envQueue), os.Getenv(envName)
	if url == "" || addr == "" || schema == "" || queue == "" {
		return fmt.Errorf("TEST_DATABASE_URL, %s, %s and %s must all be set", envTemporal, envSchema, envQueue)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	pool, c, closeAll, err := dialWorkerProcess(ctx, url, addr, "sluice-e2e-worker-"+name)
	if err != nil {
		return err
	}
	defer closeAll()

	opts := (&env{c: c, pool: pool, schema: schema}).options(throttle.Limit{Key: "svc", MaxConcurrent: 3})
	opts.Identity = fmt.Sprintf("sluice-e2e-%s@%d", name, os.Getpid())
	opts.LeaseTTL = 3 * time.Second // the kill test waits for the survivors' hand-back
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	if err != nil {
		return err
	}
	fmt.Printf("OWNER %s\n", plugin.Owner())
	// loudInterceptor wraps Sluice's (the plugin appends its own after the options' interceptors).
	w := worker.New(c, queue, worker.Options{
		DeadlockDetectionTimeout: temporaltest.DeadlockTimeout,
		Plugins:                  []worker.Plugin{plugin}, Interceptors: []interceptor.WorkerInterceptor{&loudInterceptor{}},
		WorkerStopTimeout: 5 * time.Second,
	})
	w.RegisterWorkflow(FanOut)
	w.RegisterWorkflow(BlockAll)
	w.RegisterActivity(&loudActs{acts: &acts{hold: subprocessHold}})
	if err := w.Start(); err != nil {
		return err
	}
	fmt.Println("READY")
	<-ctx.Done()
	w.Stop()
	fmt.Println("STOPPED")
	return nil
}

// loudInterceptor prints a line when an activity task reaches the worker, before Sluice's
// interceptor sees it, and another once Sluice's ExecuteActivity has returned ErrResultPending (its
// ticket is committed). A process killed between the two may or may not have committed the ticket;
// if not, the task is known to Temporal as started and to nobody else.
type loudInterceptor struct {
	interceptor.WorkerInterceptorBase
}

func (*loudInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &loudInbound{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}}
}

type loudInbound struct {
	interceptor.ActivityInboundInterceptorBase
}

func (i *loudInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	id := fmt.Sprintf("%s/%s attempt=%d", info.WorkflowExecution.ID, info.ActivityID, info.Attempt)
	fmt.Printf("GOT %s\n", id)
	res, err := i.Next.ExecuteActivity(ctx, in)
	if errors.Is(err, activity.ErrResultPending) {
		fmt.Printf("TICKETED %s\n", id)
	}
	return res, err
}

// loudActs are acts that print a line to stdout each time a Double starts and returns, so that the
// parent test sees every execution, including those of a process it kills.
type loudActs struct{ *acts }

func (a *loudActs) Double(ctx context.Context, x int) (int, error) {
	info := activity.GetInfo(ctx)
	id := info.WorkflowExecution.ID + "/" + info.ActivityID
	// One write each (os.Stdout is unbuffered): a line is in the pipe before the activity goes on.
	fmt.Printf("RAN %s attempt=%d\n", id, info.Attempt)
	v, err := a.acts.Double(ctx, x)
	if err == nil {
		fmt.Printf("DONE %s attempt=%d\n", id, info.Attempt)
	}
	return v, err
}

func (a *loudActs) Block(ctx context.Context) error { return a.acts.Block(ctx) }

// ledger gathers the RAN and DONE lines of every worker process, keyed by workflowID/activityID.
type ledger struct {
	mu   sync.Mutex
	ran  map[string][]string // key -> "<process>#<attempt>" of each start
	done map[string][]string
	// got and ticketed: "<process>#<key>#<attempt>" -> when the parent read the line.
	got, ticketed map[string]time.Time
}

func newLedger() *ledger {
	return &ledger{ran: map[string][]string{}, done: map[string][]string{}, got: map[string]time.Time{}, ticketed: map[string]time.Time{}}
}

func (l *ledger) record(proc, line string) {
	now := time.Now()
	kind, rest, _ := strings.Cut(line, " ")
	key, attempt, _ := strings.Cut(rest, " attempt=")
	l.mu.Lock()
	defer l.mu.Unlock()
	switch kind {
	case "GOT":
		l.got[proc+"#"+key+"#"+attempt] = now
	case "TICKETED":
		l.ticketed[proc+"#"+key+"#"+attempt] = now
	case "RAN":
		l.ran[key] = append(l.ran[key], proc+"#"+attempt)
	case "DONE":
		l.done[key] = append(l.done[key], proc+"#"+attempt)
	}
}

// unticketed returns the tasks proc received and printed no TICKETED line for.
func (l *ledger) unticketed(proc string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range l.got {
		if _, ok := l.ticketed[k]; !ok && strings.HasPrefix(k, proc+"#") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// ticketLatency returns the median and the largest time from GOT to TICKETED, as the parent read them.
func (l *ledger) ticketLatency() (median, largest time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for k, at := range l.ticketed {
		if got, ok := l.got[k]; ok {
			ds = append(ds, at.Sub(got))
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)-1]
}

func (l *ledger) runs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.ran {
		n += len(r)
	}
	return n
}

// inFlight returns the keys proc started and has not finished.
func (l *ledger) inFlight(proc string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, r := range l.ran {
		started := 0
		for _, x := range r {
			if strings.HasPrefix(x, proc+"#") {
				started++
			}
		}
		finished := 0
		for _, x := range l.done[k] {
			if strings.HasPrefix(x, proc+"#") {
				finished++
			}
		}
		if started > finished {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// workerProc is a worker subprocess.
type workerProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{} // closed at READY
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's, once exited

	mu      sync.Mutex
	owner   string
	stopped bool // printed STOPPED
	stderr  []string
}

func (p *workerProc) Owner() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owner
}

// startWorkerProc starts this test binary as a worker process; it is killed and reaped at the end of
// the test, whatever happens.
func startWorkerProc(t *testing.T, name string, l *ledger, env ...string) *workerProc {
	t.Helper()
	p := &workerProc{name: name, ready: make(chan struct{}), exited: make(chan struct{})}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, envWorker+"=1", envName+"="+name)...)
	cmd.Stdout = &testenv.LineWriter{Func: func(line string) {
		switch {
		case strings.HasPrefix(line, "OWNER "):
			p.mu.Lock()
			p.owner = strings.TrimPrefix(line, "OWNER ")
			p.mu.Unlock()
		case line == "READY":
			close(p.ready)
		case line == "STOPPED":
			p.mu.Lock()
			p.stopped = true
			p.mu.Unlock()
		default:
			l.record(name, line)
		}
	}}
	cmd.Stderr = &testenv.LineWriter{Func: func(line string) {
		p.mu.Lock()
		p.stderr = append(p.stderr, line)
		p.mu.Unlock()
	}}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p.cmd, p.stdin = cmd, stdin
	go func() {
		p.err = cmd.Wait() // returns once stdout and stderr are copied
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error means it has exited already
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("worker %s (pid %d) not reaped 10s after SIGKILL", name, cmd.Process.Pid)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		const maxLines = 15
		for i, line := range p.stderr {
			if i == maxLines && !t.Failed() {
				t.Logf("worker %s stderr: ... %d more lines", name, len(p.stderr)-maxLines)
				break
			}
			t.Logf("worker %s stderr: %s", name, line)
		}
	})
	return p
}

// waitReady waits for the READY line.
func (p *workerProc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("worker %s exited before it was ready: %v", p.name, p.err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker %s not ready after 2m", p.name)
	}
	require.NotEmpty(t, p.Owner(), "worker %s printed its owner before READY", p.name)
	t.Logf("worker %s ready: pid %d, owner %s", p.name, p.cmd.Process.Pid, p.Owner())
}

// stopGracefully sends SIGTERM and waits for a clean exit.
func (p *workerProc) stopGracefully(t *testing.T) {
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

// ticketStates counts the tickets in schema by owner and state.
func ticketStates(ctx context.Context, pool *pgxpool.Pool, schema string) (map[string]map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT owner, state, count(*) FROM `+pgx.Identifier{schema, "sluice_ticket"}.Sanitize()+` GROUP BY owner, state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var owner, state string
		var n int
		if err := rows.Scan(&owner, &state, &n); err != nil {
			return nil, err
		}
		if out[owner] == nil {
			out[owner] = map[string]int{}
		}
		out[owner][state] = n
	}
	return out, rows.Err()
}

func unfinished(states map[string]int) int {
	return states["queued"] + states["admitted"] + states["running"]
}

// TestPlugin_WorkerStoppedAndKilled runs a fan-out over three real worker processes, stops one
// gracefully (SIGTERM) and kills another (SIGKILL) while they hold tickets, and checks that the
// survivors, and a worker started after the kill, finish every activity with the right result.
//
// The activities have a HeartbeatTimeout (8s) well above the time B's tickets take to be handed back
// (lease TTL 3s plus a sweep of 1s): a task Temporal gave B that B had not yet written a ticket for
// when it died is known to nobody but Temporal, and only a Temporal timeout gets it retried. The test
// logs how many there were, and how each retried activity's last failure came about.
func TestPlugin_WorkerStoppedAndKilled(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	testdb.URL(t) // skips (or fails under CI) without a database; the workers read the variable
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	queue := "q-" + testdb.NewSchemaName()
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	l := newLedger()
	procEnv := []string{envTemporal + "=" + s.Addr, envSchema + "=" + schema, envQueue + "=" + queue}
	a := startWorkerProc(t, "A", l, procEnv...)
	b := startWorkerProc(t, "B", l, procEnv...)
	cw := startWorkerProc(t, "C", l, procEnv...)
	for _, p := range []*workerProc{a, b, cw} {
		p.waitReady(t)
	}
	byOwner := func() map[string]map[string]int {
		m, err := ticketStates(ctx, pool, schema)
		require.NoError(t, err)
		return m
	}
	// poll polls the tickets until cond holds of them. The condition runs in Eventually's goroutine:
	// errors are kept for the failure message rather than failing from there.
	poll := func(what string, timeout time.Duration, cond func(map[string]map[string]int) bool) map[string]map[string]int {
		t.Helper()
		var last map[string]map[string]int
		var lastErr error
		var mu sync.Mutex
		ok := func() bool {
			m, err := ticketStates(ctx, pool, schema)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr = err
				return false
			}
			last = m
			return cond(m)
		}
		defer func() {
			if t.Failed() { // Eventually failed: say what was last seen
				mu.Lock()
				t.Logf("%s: last tickets by owner: %v; last error: %v", what, last, lastErr)
				mu.Unlock()
			}
		}()
		require.Eventually(t, ok, timeout, 10*time.Millisecond, what)
		mu.Lock()
		defer mu.Unlock()
		return last
	}

	const n = 60
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FanOut, fanOutInput{N: n, MaxAttempts: 0, HeartbeatTimeout: 8 * time.Second})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpState(t, c, pool, schema, run, l)
		}
	}()

	// A stops gracefully while it has queued tickets and some activities have run.
	snap := poll("A has queued tickets and 3 activities ran", 2*time.Minute, func(m map[string]map[string]int) bool {
		return m[a.Owner()]["queued"] > 0 && l.runs() >= 3
	})
	t.Logf("SIGTERM A %s after start: tickets A %v, B %v, C %v; %d runs so far",
		time.Since(start).Round(time.Millisecond), snap[a.Owner()], snap[b.Owner()], snap[cw.Owner()], l.runs())
	// The limit is paused while A stops, so that the fan-out cannot finish before B's part: a stop
	// can take seconds on a busy machine, and 60 activities take a few at MaxConcurrent 3. Runs
	// admitted already go on; what the pause keeps from this test (other owners admitting A's tickets
	// while A hands them back) is TestDispatcher_StopHandsBackTicketsOthersHeldLocked's.
	require.NoError(t, q.Pause(ctx, "svc", time.Now().Add(time.Hour)))
	stopAt := time.Now()
	a.stopGracefully(t)
	m := byOwner()
	require.Zero(t, unfinished(m[a.Owner()]), "A handed back all its tickets before it exited: %v", m[a.Owner()])
	var leases int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "sluice_owner"}.Sanitize()+` WHERE id = $1`, a.Owner()).Scan(&leases))
	require.Zero(t, leases, "A dropped its lease")
	require.Empty(t, l.inFlight("A"), "A's running activities finished before it exited")
	require.Empty(t, l.unticketed("A"), "A wrote a ticket for every task it received")
	t.Logf("A exited %s after SIGTERM", time.Since(stopAt).Round(time.Millisecond))
	require.NoError(t, q.Resume(ctx, "svc"))

	// B is killed while it has a running ticket and a queued one.
	snap = poll("B has running and queued tickets", 2*time.Minute, func(m map[string]map[string]int) bool {
		return m[b.Owner()]["running"] > 0 && m[b.Owner()]["queued"] > 0
	})
	require.NoError(t, b.cmd.Process.Kill())
	killedAt := time.Now()
	<-b.exited // and its stdout is all read
	require.Error(t, b.err, "B was killed")
	atKill := byOwner()[b.Owner()]
	var leaseLeft float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM lease_expires_at - clock_timestamp()) FROM `+
		pgx.Identifier{schema, "sluice_owner"}.Sanitize()+` WHERE id = $1`, b.Owner()).Scan(&leaseLeft))
	leaseLeft += time.Since(killedAt).Seconds() // as of the kill
	inFlightB, unticketedB := l.inFlight("B"), l.unticketed("B")
	t.Logf("SIGKILL B %s after start: tickets B %v just before, %v just after; C %v; B's lease had %.2fs left; "+
		"B's activities running per its stdout: %v; tasks B received with no TICKETED line: %v",
		killedAt.Sub(start).Round(time.Millisecond), snap[b.Owner()], atKill, snap[cw.Owner()], leaseLeft, inFlightB, unticketedB)
	require.Positive(t, unfinished(atKill), "B held unfinished tickets when it died")

	// A fresh worker joins after the kill.
	d := startWorkerProc(t, "D", l, procEnv...)
	d.waitReady(t)

	// The survivors hand B's tickets back once its lease lapses. Nothing writes B's tickets any more, so
	// their unfinished count only falls: the first poll that sees zero dates the last hand-back (to
	// within the poll interval).
	maxAdmittedB := 0
	poll("B's tickets handed back", 2*time.Minute, func(m map[string]map[string]int) bool {
		maxAdmittedB = max(maxAdmittedB, m[b.Owner()]["admitted"])
		return unfinished(m[b.Owner()]) == 0
	})
	handBack := time.Since(killedAt)
	t.Logf("last of B's tickets handed back %s after the kill (lease TTL 3s, %.2fs of it left at the kill); "+
		"up to %d of B's queued tickets were admitted to the dead owner meanwhile, holding slots of the limit",
		handBack.Round(time.Millisecond), leaseLeft, maxAdmittedB)

	// Tasks Temporal counts as started that no worker's interceptor ever saw: they were in transit to
	// a worker when it stopped or died, and only a Temporal timeout brings them back.
	names := map[string]string{}
	for _, p := range []*workerProc{a, b, cw, d} {
		names[strconv.Itoa(p.cmd.Process.Pid)] = p.name
	}
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	require.NoError(t, err)
	var lost []string
	for _, pa := range desc.PendingActivities {
		if pa.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED {
			continue
		}
		suffix := fmt.Sprintf("#%s/%s#%d", run.GetID(), pa.GetActivityId(), pa.GetAttempt())
		l.mu.Lock()
		seen := false
		for k := range l.got {
			seen = seen || strings.HasSuffix(k, suffix)
		}
		l.mu.Unlock()
		if !seen {
			pid, _, _ := strings.Cut(pa.GetLastWorkerIdentity(), "@")
			at := pa.GetLastStartedTime().AsTime()
			lost = append(lost, fmt.Sprintf("%s#%d to %s at SIGTERM(A)%+dms SIGKILL(B)%+dms", pa.GetActivityId(), pa.GetAttempt(),
				names[pid], at.Sub(stopAt).Milliseconds(), at.Sub(killedAt).Milliseconds()))
		}
	}
	slices.Sort(lost)
	t.Logf("tasks started in Temporal that no interceptor saw: %v", lost)

	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, 2*(n-1)*n/2, sum, "every activity completed with the right result")
	t.Logf("workflow finished %s after start, %s after the kill", time.Since(start).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))

	cw.stopGracefully(t)
	d.stopGracefully(t)

	// Every process has exited: the ledger is complete and no longer written.
	require.Len(t, l.done, n, "every activity ran to its end in some process")
	var twice []string
	byProc := map[string]int{}
	for k, r := range l.ran {
		if len(r) > 1 {
			twice = append(twice, fmt.Sprintf("%s%v", k[strings.LastIndexByte(k, '/')+1:], r))
		}
		for _, x := range r {
			byProc[x[:1]]++
		}
	}
	completedTwice := 0
	for _, r := range l.done {
		if len(r) > 1 {
			completedTwice++
		}
	}
	slices.Sort(twice)
	med, largest := l.ticketLatency()
	t.Logf("runs by process: %v; %d of %d activities ran more than once (activity[process#attempt ...]): %v; %d completed more than once; "+
		"task received to ticket written: median %s, largest %s",
		byProc, len(twice), n, twice, completedTwice, med.Round(time.Millisecond), largest.Round(time.Millisecond))
	for _, k := range inFlightB {
		require.GreaterOrEqual(t, len(l.ran[k]), 2, "%s, cut short by the kill, ran again: %v", k, l.ran[k])
	}
	causes, timedOut := retryCauses(t, c, run)
	var seen []string
	for _, id := range timedOut {
		key := run.GetID() + "/" + id
		var got []string
		for k := range l.got {
			if strings.Contains(k, "#"+key+"#") {
				got = append(got, k[:strings.IndexByte(k, '#')]+k[strings.LastIndexByte(k, '#'):])
			}
		}
		slices.Sort(got)
		seen = append(seen, fmt.Sprintf("%s received by %v", id, got))
	}
	t.Logf("retried activities by the last failure Temporal recorded: %v; those that timed out: %v", causes, seen)

	problems, err := q.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	left := byOwner()
	for owner, states := range left {
		require.Zero(t, unfinished(states), "owner %s has unfinished tickets left: %v", owner, states)
	}
	t.Logf("tickets left by owner and state: %v", left)
}

// retryCauses counts the workflow's activities that took more than one attempt by the failure of
// their last failed attempt, as Temporal recorded it in the final attempt's started event.
// It also returns the IDs of the activities whose last failure was a timeout.
func retryCauses(t *testing.T, c client.Client, run client.WorkflowRun) (map[string]int, []string) {
	t.Helper()
	ids := map[int64]string{} // scheduled event ID -> activity ID
	var timedOut []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int{}
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if sched := ev.GetActivityTaskScheduledEventAttributes(); sched != nil {
			ids[ev.GetEventId()] = sched.GetActivityId()
		}
		started := ev.GetActivityTaskStartedEventAttributes()
		if started == nil || started.GetAttempt() <= 1 {
			continue
		}
		f := started.GetLastFailure()
		cause := f.GetMessage()
		switch {
		case f.GetApplicationFailureInfo() != nil:
			cause = f.GetApplicationFailureInfo().GetType()
		case f.GetTimeoutFailureInfo() != nil:
			cause = "timeout:" + f.GetTimeoutFailureInfo().GetTimeoutType().String()
			timedOut = append(timedOut, ids[started.GetScheduledEventId()])
		}
		out[fmt.Sprintf("%s(final attempt %d)", cause, started.GetAttempt())]++
	}
	return out, timedOut
}

// dumpState logs what is left of a fan-out that did not finish: Temporal's pending activities, the
// tickets, and the activities that never completed in any process.
func dumpState(t *testing.T, c client.Client, pool *pgxpool.Pool, schema string, run client.WorkflowRun, l *ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		t.Logf("describe workflow: %v", err)
	} else {
		for _, pa := range desc.PendingActivities {
			t.Logf("pending activity %s: state %s attempt %d last worker %q last started %v last failure %v",
				pa.ActivityId, pa.State, pa.Attempt, pa.LastWorkerIdentity, pa.LastStartedTime.AsTime(), pa.LastFailure.GetMessage())
		}
	}
	rows, err := pool.Query(ctx, `SELECT id, state, owner, activity_id, attempt, coalesce(outcome_kind, ''), deliveries FROM `+
		pgx.Identifier{schema, "sluice_ticket"}.Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Logf("read tickets: %v", err)
	} else {
		for rows.Next() {
			var id int64
			var state, owner, act, kind string
			var attempt, deliveries int
			if err := rows.Scan(&id, &state, &owner, &act, &attempt, &kind, &deliveries); err == nil {
				t.Logf("ticket %d: %s owner %s activity %s attempt %d outcome %q deliveries %d", id, state, owner, act, attempt, kind, deliveries)
			}
		}
		rows.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, r := range l.ran {
		if len(l.done[k]) == 0 {
			t.Logf("activity %s ran %v and never completed", k, r)
		}
	}
	for k := range l.got {
		if _, ok := l.ticketed[k]; !ok {
			t.Logf("task %s received, never ticketed", k)
		}
	}
}

// dialWorkerProcess gives a worker subprocess its Postgres pool (named appName in pg_stat_activity)
// and Temporal client; closeAll closes both.
func dialWorkerProcess(ctx context.Context, url, addr, appName string) (*pgxpool.Pool, client.Client, func(), error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := client.Dial(client.Options{HostPort: addr, Logger: temporaltest.QuietLogger(), RPCTimeout: temporaltest.RPCTimeout})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, c, func() { c.Close(); pool.Close() }, nil
}
