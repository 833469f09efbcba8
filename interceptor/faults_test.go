package interceptor_test

// Fault-tolerance scenarios: worker processes killed at random, a Postgres restart, a Temporal
// outage while outcomes wait for delivery, and hostile input. Each runs real processes (worker
// subprocesses, a private Postgres cluster, the Temporal dev server) and ends with the invariant
// checks: q.Verify clean, no ticket left queued, admitted or running, and no limit exceeded as the
// activities themselves observed it.
//
// The tests run in a short configuration by default (make test); SLUICE_FAULTS=full selects the long
// form (make test-faults). Each logs a FAULTS-ROW line: the row of the README's fault table.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/pgcluster"
	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// faultsFull reports whether SLUICE_FAULTS=full asks for the long form.
func faultsFull() bool { return os.Getenv("SLUICE_FAULTS") == "full" }

// The environment of a fault worker subprocess. startWorkerProc (subprocess_test.go) starts it; the
// variable below makes init run this file's worker instead of the e2e one, before TestMain.
const (
	envFaultsWorker   = "SLUICE_FAULTS_WORKER"   // "1": act as a fault worker process
	envFaultsTemporal = "SLUICE_FAULTS_TEMPORAL" // Temporal frontend host:port (possibly a proxy)
	envFaultsSchema   = "SLUICE_FAULTS_SCHEMA"   // Sluice schema, migrated, with a faults_run table
	envFaultsQueue    = "SLUICE_FAULTS_QUEUE"    // task queue
	envFaultsMaxConc  = "SLUICE_FAULTS_MAXCONC"  // MaxConcurrent of limit "svc"
	envFaultsHold     = "SLUICE_FAULTS_HOLD"     // how long each FaultWork holds, a Go duration
	envFaultsGate     = "SLUICE_FAULTS_GATE"     // when set, FaultWork waits for the file $gate/release before it returns
)

func init() {
	if os.Getenv(envFaultsWorker) != "1" {
		return
	}
	if err := faultsWorkerProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice faults worker:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// faultsRunTable records every execution of FaultWork in a worker process, with the database clock:
// the activities' own record of what ran, where, and when. Its start and finish lie within the
// ticket's admission and release, so the largest overlap of its intervals is the concurrency the
// limit let through.
const faultsRunTable = `CREATE TABLE %s.faults_run (id bigserial PRIMARY KEY, act text NOT NULL, proc text NOT NULL,
	attempt int NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz)`

// faultsWorkerProcess runs until SIGTERM (graceful stop) or until its stdin closes. It prints OWNER,
// READY and STOPPED lines as the e2e worker does, so that startWorkerProc drives it, and RAN and
// DONE lines that the ledger records.
func faultsWorkerProcess() error {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	addr, schema, queue, name := os.Getenv(envFaultsTemporal), os.Getenv(envFaultsSchema), os.Getenv(envFaultsQueue), os.Getenv(envName)
	maxConc, err := strconv.Atoi(os.Getenv(envFaultsMaxConc))
	if err != nil {
		return fmt.Errorf("%s: %w", envFaultsMaxConc, err)
	}
	hold, err := time.ParseDuration(os.Getenv(envFaultsHold))
	if err != nil {
		return fmt.Errorf("%s: %w", envFaultsHold, err)
	}
	if url == "" || addr == "" || schema == "" || queue == "" {
		return errors.New("TEST_DATABASE_URL and the SLUICE_FAULTS_* variables must be set")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pool, c, closeAll, err := dialWorkerProcess(ctx, url, addr, "sluice-faults-worker-"+name)
	if err != nil {
		return err
	}
	defer closeAll()
	opts := faultsOptions(pool, c, schema, throttle.Limit{Key: "svc", MaxConcurrent: maxConc})
	opts.Identity = fmt.Sprintf("sluice-faults-%s@%d", name, os.Getpid())
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	if err != nil {
		return err
	}
	fmt.Printf("OWNER %s\n", plugin.Owner())
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	a := &faultActs{hold: hold, record: func(ctx context.Context, key string, attempt int32) (func() error, error) {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO `+table+` (act, proc, attempt) VALUES ($1, $2, $3) RETURNING id`, key, name, attempt).Scan(&id); err != nil {
			return nil, err
		}
		fmt.Printf("RAN %s attempt=%d\n", key, attempt)
		return func() error {
			_, err := pool.Exec(context.WithoutCancel(ctx), `UPDATE `+table+` SET finished_at = clock_timestamp() WHERE id = $1`, id)
			return err
		}, nil
	}}
	if gate := os.Getenv(envFaultsGate); gate != "" {
		a.gate = func(ctx context.Context) error {
			for {
				if _, err := os.Stat(filepath.Join(gate, "release")); err == nil {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: testDeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	faultsRegister(w, a)
	if err := w.Start(); err != nil {
		return err
	}
	fmt.Println("READY")
	<-ctx.Done()
	w.Stop()
	fmt.Println("STOPPED")
	return nil
}

// faultActs are the activities of the fault scenarios. Their counters are the activities' own
// observation of concurrency (in one process).
type faultActs struct {
	hold           time.Duration
	inFlight, peak atomic.Int64
	runs           sync.Map // workflowID/activityID -> *atomic.Int64
	mu             sync.Mutex
	starts         []time.Time
	// record, when set, records the start of a run and returns the function recording its end.
	record func(ctx context.Context, key string, attempt int32) (func() error, error)
	// gate, when set, is waited for after the work, before the result is returned.
	gate func(ctx context.Context) error
}

// FaultWork returns 2*x after holding for a while, heartbeating.
func (a *faultActs) FaultWork(ctx context.Context, x int) (int, error) {
	info := activity.GetInfo(ctx)
	key := info.WorkflowExecution.ID + "/" + info.ActivityID
	var finish func() error
	if a.record != nil {
		f, err := a.record(ctx, key, info.Attempt)
		if err != nil {
			return 0, err
		}
		finish = f
	}
	v, _ := a.runs.LoadOrStore(key, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	a.mu.Lock()
	a.starts = append(a.starts, time.Now())
	a.mu.Unlock()
	n := a.inFlight.Add(1)
	for {
		p := a.peak.Load()
		if n <= p || a.peak.CompareAndSwap(p, n) {
			break
		}
	}
	activity.RecordHeartbeat(ctx, x)
	deadline := time.Now().Add(a.hold)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			// Cut short (Temporal no longer wants this attempt): the run ends here all the same.
			a.inFlight.Add(-1)
			if finish != nil {
				_ = finish()
			}
			return 0, ctx.Err()
		case <-time.After(min(time.Until(deadline), time.Second)):
			activity.RecordHeartbeat(ctx, x)
		}
	}
	a.inFlight.Add(-1)
	if finish != nil {
		if err := finish(); err != nil {
			return 0, err
		}
	}
	if a.gate != nil {
		if err := a.gate(ctx); err != nil {
			return 0, err
		}
	}
	if a.record != nil {
		fmt.Printf("DONE %s attempt=%d\n", key, info.Attempt)
	}
	return 2 * x, nil
}

// FaultPanic panics.
func (a *faultActs) FaultPanic(ctx context.Context) error { panic("faults: the activity panics") }

// FaultIgnoreDeadline sleeps for d whatever its context says.
func (a *faultActs) FaultIgnoreDeadline(ctx context.Context, d time.Duration) error {
	time.Sleep(d)
	return nil
}

// FaultBadCostNegative and FaultBadCostHuge are routed, in TestFaults_BadInput, through cost
// functions that return a bad cost: they never run.
func (a *faultActs) FaultBadCostNegative(ctx context.Context) error { return nil }

func (a *faultActs) FaultBadCostHuge(ctx context.Context) error { return nil }

// FaultHeaders reports h to Sluice as a provider's response headers.
func (a *faultActs) FaultHeaders(ctx context.Context, h http.Header) error {
	return sluiceactivity.ReportHeaders(ctx, h)
}

type faultsFanOutInput struct {
	N                int
	HeartbeatTimeout time.Duration
}

// FaultsFanOut runs N FaultWork activities at once and returns the sum of their results.
func FaultsFanOut(ctx workflow.Context, in faultsFanOutInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: in.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1},
	})
	return sumActivities(ctx, "FaultWork", in.N)
}

type faultsOneInput struct {
	Activity     string
	StartToClose time.Duration
	MaxAttempts  int32
	Sleep        time.Duration // FaultIgnoreDeadline
	Header       http.Header   // FaultHeaders
	X            int           // FaultWork
}

// FaultsOne runs one activity.
func FaultsOne(ctx workflow.Context, in faultsOneInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: in.StartToClose,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: in.MaxAttempts},
	})
	var args []any
	switch in.Activity {
	case "FaultIgnoreDeadline":
		args = []any{in.Sleep}
	case "FaultHeaders":
		args = []any{in.Header}
	case "FaultWork":
		args = []any{in.X}
	}
	var v int
	err := workflow.ExecuteActivity(ctx, in.Activity, args...).Get(ctx, &v)
	return v, err
}

func faultsRegister(w worker.Worker, a *faultActs) {
	w.RegisterWorkflow(FaultsFanOut)
	w.RegisterWorkflow(FaultsOne)
	w.RegisterActivity(a)
}

// faultsOptions routes every fault activity to limit "svc".
func faultsOptions(pool *pgxpool.Pool, c client.Client, schema string, limits ...throttle.Limit) sluiceinterceptor.Options {
	svc := sluiceinterceptor.Route{Limits: []string{"svc"}, Cost: func([]any) (int64, error) { return 10, nil }}
	return sluiceinterceptor.Options{
		Pool: pool, Client: c, Schema: schema, Limits: limits,
		Routes: map[string]sluiceinterceptor.Route{
			"FaultWork": svc, "FaultPanic": svc, "FaultIgnoreDeadline": svc, "FaultHeaders": svc,
		},
		PollInterval: 200 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond, LeaseTTL: 3 * time.Second,
	}
}

// faultsStartWorker starts an in-process worker on queue, stopped at the end of the test.
func faultsStartWorker(t *testing.T, c client.Client, queue string, opts sluiceinterceptor.Options, a *faultActs, register ...func(worker.Worker)) *sluiceinterceptor.Plugin {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testenv.Logger(t)
	}
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	require.NoError(t, err)
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: testDeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	faultsRegister(w, a)
	for _, r := range register {
		r(w)
	}
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return plugin
}

// faultsCheckQueue runs the invariant checks on a schema: Verify clean, and no ticket left queued,
// admitted or running; it returns the tickets left by state (finished ones waiting for delivery
// are not expected either once the workflows are done, but returned ones are).
func faultsCheckQueue(t *testing.T, ctx context.Context, q *pgqueue.Queue, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	problems, err := q.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems, "Verify")
	states := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT state, count(*) FROM `+pgx.Identifier{q.Schema(), "sluice_ticket"}.Sanitize()+` GROUP BY state`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		states[s] = n
	}
	require.NoError(t, rows.Err())
	require.Zero(t, unfinished(states), "no ticket is left queued, admitted or running: %v", states)
	stats, err := q.Status(ctx)
	require.NoError(t, err)
	for _, s := range stats {
		require.Zero(t, s.State.InflightCount, "limit %q has nothing in flight at the end", s.Configured.Key)
	}
	return states
}

// faultsRow logs the scenario's row of the README table.
func faultsRow(t *testing.T, scenario string, runs, lost, twice, violations int, recovery string) {
	t.Helper()
	form := "short"
	if faultsFull() {
		form = "full"
	}
	t.Logf("FAULTS-ROW | %s (%s) | %d | %d | %d | %d | %s |", scenario, form, runs, lost, twice, violations, recovery)
}

// faultsMaxOverlap returns the largest number of FaultWork runs in faults_run that overlapped. A
// finish at the instant of another's start does not overlap it.
func faultsMaxOverlap(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	var n int
	err := pool.QueryRow(ctx, `WITH ev AS (
			SELECT started_at AS at, 1 AS d FROM `+table+`
			UNION ALL SELECT finished_at, -1 FROM `+table+` WHERE finished_at IS NOT NULL)
		SELECT coalesce(max(c), 0) FROM (SELECT sum(d) OVER (ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS c FROM ev) x`).Scan(&n)
	return n, err
}

func faultsDurations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n/a"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %s, max %s", s[len(s)/2].Round(10*time.Millisecond), s[len(s)-1].Round(10*time.Millisecond))
}

// TestFaults_RandomKills runs one workflow of throttled activities over three worker processes while
// a killer SIGKILLs a random worker every 1-3s and starts a replacement each time. Every activity
// completes with the right result; those that ran more than once are bounded by what the killed
// workers were running; the activities never overlapped beyond MaxConcurrent.
func TestFaults_RandomKills(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	testdb.URL(t)
	n, kills, hold, timeout := 120, 4, 300*time.Millisecond, 8*time.Minute
	if faultsFull() {
		n, kills, timeout = 500, 15, 15*time.Minute
	}
	const maxConc = 4
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	_, err := pool.Exec(context.Background(), fmt.Sprintf(faultsRunTable, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	l := newLedger()
	procEnv := []string{envFaultsWorker + "=1", envFaultsTemporal + "=" + s.Addr, envFaultsSchema + "=" + schema,
		envFaultsQueue + "=" + queue, envFaultsMaxConc + "=" + strconv.Itoa(maxConc), envFaultsHold + "=" + hold.String()}
	var live []*workerProc
	next := 0
	spawn := func() *workerProc {
		name := string(rune('A' + next%26))
		if next >= 26 {
			name += strconv.Itoa(next / 26)
		}
		next++
		p := startWorkerProc(t, name, l, procEnv...)
		p.waitReady(t)
		return p
	}
	for range 3 {
		live = append(live, spawn())
	}

	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n, HeartbeatTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpState(t, c, pool, schema, run, l)
		}
	}()
	result := make(chan error, 1)
	var sum int
	go func() { result <- run.Get(ctx, &sum) }()

	type kill struct {
		proc, owner string
		at          time.Time
		running     int // runs in progress just before the kill
		tickets     map[string]int
	}
	var (
		killed     []kill
		recMu      sync.Mutex
		recoveries []time.Duration
		recWG      sync.WaitGroup
		done       bool
		wfErr      error
	)
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	cutByKill := map[string]bool{} // activities a kill cut short
	for len(killed) < kills && !done {
		select {
		case wfErr = <-result:
			done = true
			continue
		case <-time.After(time.Second + rand.N(2*time.Second)):
		}
		i := rand.N(len(live))
		p := live[i]
		var running int // per the runs it recorded
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE proc = $1 AND finished_at IS NULL`, p.name).Scan(&running))
		require.NoError(t, p.cmd.Process.Kill())
		at := time.Now()
		<-p.exited
		// The killed process's runs ended at the latest now; their tickets are released later.
		// Those are the runs the kill cut short.
		rows, err := pool.Query(ctx, `UPDATE `+table+` SET finished_at = greatest(started_at, clock_timestamp())
			WHERE proc = $1 AND finished_at IS NULL RETURNING act`, p.name)
		require.NoError(t, err)
		acts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, act := range acts {
			cutByKill[act] = true
		}
		states, err := ticketStates(ctx, pool, schema)
		require.NoError(t, err)
		k := kill{proc: p.name, owner: p.Owner(), at: at, running: running, tickets: states[p.Owner()]}
		killed = append(killed, k)
		t.Logf("kill %d: SIGKILL %s %s after start; runs in progress just before: %d; its tickets just after: %v",
			len(killed), p.name, at.Sub(start).Round(time.Millisecond), running, k.tickets)
		recWG.Go(func() {
			for ctx.Err() == nil {
				m, err := ticketStates(ctx, pool, schema)
				if err == nil && unfinished(m[k.owner]) == 0 {
					recMu.Lock()
					recoveries = append(recoveries, time.Since(k.at))
					recMu.Unlock()
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		live[i] = spawn()
	}
	if !done {
		wfErr = <-result
	}
	require.NoError(t, wfErr)
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	elapsed := time.Since(start)
	recWG.Wait()
	for _, p := range live {
		p.stopGracefully(t)
	}
	// A process killed while its INSERT was in flight may have left a run without an end.
	for _, k := range killed {
		_, err := pool.Exec(ctx, `UPDATE `+table+` SET finished_at = started_at WHERE proc = $1 AND finished_at IS NULL`, k.proc)
		require.NoError(t, err)
	}

	// Every process has exited: the ledger is complete.
	lost := n - len(l.done)
	var twice []string
	for key, r := range l.ran {
		if len(r) > 1 {
			twice = append(twice, fmt.Sprintf("%s%v", key[strings.LastIndexByte(key, '/')+1:], r))
		}
	}
	slices.Sort(twice)
	runningAtKills := 0
	for _, k := range killed {
		runningAtKills += k.running
	}
	overlap, err := faultsMaxOverlap(ctx, pool, schema)
	require.NoError(t, err)
	causes, _ := retryCauses(t, c, run)
	// A run cut short by a kill runs again: at most MaxConcurrent runs are in progress at a kill (the
	// limit is global). Any other repeat is of an attempt Temporal gave up on while a live worker held
	// it (a heartbeat timeout of a queued ticket), whose ticket was admitted and run all the same.
	var byKill, onLive []string
	for key, r := range l.ran {
		if len(r) < 2 {
			continue
		}
		label := fmt.Sprintf("%s%v", key[strings.LastIndexByte(key, '/')+1:], r)
		if cutByKill[key] {
			byKill = append(byKill, label)
		} else {
			onLive = append(onLive, label)
		}
	}
	slices.Sort(byKill)
	slices.Sort(onLive)
	t.Logf("%d activities, %d kills in %s; %d runs; %d activities ran more than once: %d after a kill cut a run short "+
		"(%d runs were in progress at the kills): %v; %d otherwise: %v; retries by last failure: %v; "+
		"largest overlap of runs %d (MaxConcurrent %d); kill -> tickets handed back: %s",
		n, len(killed), elapsed.Round(time.Millisecond), l.runs(), len(twice), len(byKill), runningAtKills, byKill,
		len(onLive), onLive, causes, overlap, maxConc, faultsDurations(recoveries))
	require.Zero(t, lost, "activities that never completed anywhere")
	require.LessOrEqual(t, len(byKill), len(killed)*maxConc+len(killed), "repeats after a kill are bounded by what the killed workers ran")
	require.LessOrEqual(t, overlap, maxConc, "the activities' own observation of concurrency")
	require.Len(t, recoveries, len(killed), "every killed worker's tickets were handed back")
	faultsCheckQueue(t, ctx, q, pool)
	violations := max(0, overlap-maxConc)
	faultsRow(t, fmt.Sprintf("random SIGKILL of 1 of 3 workers every 1-3s, %d activities", n), len(killed), lost, len(twice), violations,
		"kill -> tickets handed back: "+faultsDurations(recoveries))
}

// TestFaults_PostgresRestart runs three in-process workers against a private Postgres cluster and
// restarts it (fast shutdown, 2s down, start) while activities are queued and running. The
// dispatchers reconnect (claims, owner loops, notification listeners, leases, deliveries, enqueues
// that failed meanwhile are retried by Temporal), every activity completes once the database is back,
// the limit holds throughout, and no ticket is left behind.
//
// The runs holding the limit's slots at the restart have done their work and wait at a gate until
// the database is back. A run that finishes while the database is down is not covered: the
// dispatcher records its outcome once (runtime.startRun: Complete's error is logged and the ticket
// stays running under a live owner, holding its slot for as long as the process lives), which with
// every slot caught that way stops the limit for good.
func TestFaults_PostgresRestart(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	cluster := pgcluster.Start(t)
	n, restarts := 150, 1
	if faultsFull() {
		n, restarts = 600, 3
	}
	const maxConc = 5
	cfg, err := pgxpool.ParseConfig(cluster.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-faults"
	pool := testdb.PoolWith(t, cfg)
	schema := testdb.Schema(t, pool)
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	require.NoError(t, err)
	c := s.Client(t)
	queue := "q-" + testdb.NewSchemaName()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	g := newFaultsGate()
	a := &faultActs{hold: 100 * time.Millisecond, gate: g.wait}
	for range 3 {
		opts := faultsOptions(pool, c, schema, throttle.Limit{Key: "svc", MaxConcurrent: maxConc})
		// A lease longer than the outage: a live worker's tickets are not handed back because the
		// database was away for a moment.
		opts.LeaseTTL = 15 * time.Second
		// Errors only: every loop warns about the database while it is down.
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		faultsStartWorker(t, c, queue, opts, a)
	}
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n, HeartbeatTimeout: 10 * time.Second})
	require.NoError(t, err)
	result := make(chan error, 1)
	var sum int
	go func() { result <- run.Get(ctx, &sum) }()
	defer func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rows, err := pool.Query(ctx, `SELECT id, lease_expires_at - clock_timestamp() FROM `+pgx.Identifier{schema, "sluice_owner"}.Sanitize())
			if err == nil {
				for rows.Next() {
					var id string
					var left time.Duration
					_ = rows.Scan(&id, &left)
					t.Logf("owner %s: lease has %s left", id, left)
				}
				rows.Close()
			}
			states, _ := ticketStates(ctx, pool, schema)
			t.Logf("tickets by owner: %v", states)
			t.Logf("server log:\n%s", cluster.Log(15))
		}
	}()

	runs := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.starts)
	}
	var recoveries, outages []time.Duration
	for i := range restarts {
		// Mid-run: some activities have run, many wait queued.
		target := n * (i + 1) / (restarts + 2)
		require.Eventually(t, func() bool { return runs() >= target }, 2*time.Minute, 10*time.Millisecond, "%d runs before restart %d", target, i+1)
		// Every slot of the limit is held by a run that has done its work and waits at the gate, so
		// no run records its outcome while the database is down (see the comment on the test).
		g.shut()
		require.Eventually(t, func() bool { return g.waiting.Load() == maxConc }, 3*time.Minute, 5*time.Millisecond,
			"all %d slots held by runs waiting at the gate", maxConc)
		stopAt := time.Now()
		require.NoError(t, cluster.Stop("fast"))
		time.Sleep(2 * time.Second)
		require.NoError(t, cluster.Start(), "server log:\n%s", cluster.Log(20))
		upAt := time.Now()
		g.open()
		outages = append(outages, upAt.Sub(stopAt))
		var first time.Time
		require.Eventually(t, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, st := range a.starts {
				if st.After(upAt) {
					first = st
					return true
				}
			}
			return false
		}, 2*time.Minute, 10*time.Millisecond, "an activity is admitted after restart %d", i+1)
		recoveries = append(recoveries, first.Sub(stopAt))
		t.Logf("restart %d at %s: %d runs before it; down %s; first admission %s after the stop, %s after the start",
			i+1, stopAt.Sub(start).Round(time.Millisecond), target, upAt.Sub(stopAt).Round(time.Millisecond),
			first.Sub(stopAt).Round(time.Millisecond), first.Sub(upAt).Round(time.Millisecond))
	}
	select {
	case err = <-result:
	case <-ctx.Done():
		states, _ := ticketStates(context.Background(), pool, schema)
		t.Fatalf("workflow not done: tickets by owner %v", states)
	}
	require.NoError(t, err)
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	twice := 0
	a.runs.Range(func(_, v any) bool {
		if v.(*atomic.Int64).Load() > 1 {
			twice++
		}
		return true
	})
	causes, _ := retryCauses(t, c, run)
	t.Logf("%d activities in %s over %d restart(s); %d runs, %d activities ran more than once; retries by last failure: %v; "+
		"peak concurrency observed by the activities %d (MaxConcurrent %d)",
		n, time.Since(start).Round(time.Millisecond), restarts, runs(), twice, causes, a.peak.Load(), maxConc)
	require.LessOrEqual(t, a.peak.Load(), int64(maxConc), "the activities' own observation of concurrency")
	faultsCheckQueue(t, ctx, q, pool)
	faultsRow(t, fmt.Sprintf("Postgres restart (fast stop, 2s down), 3 workers, %d activities", n), restarts, 0, twice,
		int(max(0, a.peak.Load()-maxConc)), fmt.Sprintf("stop -> first admission: %s (outage %s)", faultsDurations(recoveries), faultsDurations(outages)))
}

// faultsGate holds runs that have done their work until it is open. It starts open.
type faultsGate struct {
	mu      sync.Mutex
	ch      chan struct{} // closed while open
	waiting atomic.Int64
}

func newFaultsGate() *faultsGate {
	g := &faultsGate{ch: make(chan struct{})}
	close(g.ch)
	return g
}

func (g *faultsGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *faultsGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// wait is a faultActs gate: it heartbeats while it waits.
func (g *faultsGate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			activity.RecordHeartbeat(ctx)
		}
	}
}

// faultsProxy forwards TCP connections to target until it is put down, which drops every
// connection and refuses new ones; up listens again on the same address.
type faultsProxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]struct{}
}

func newFaultsProxy(t *testing.T, target string) *faultsProxy {
	t.Helper()
	p := &faultsProxy{target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	require.NoError(t, p.up())
	t.Cleanup(p.down)
	return p
}

func (p *faultsProxy) up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // put down meanwhile
				p.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	return nil
}

func (p *faultsProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// TestFaults_TemporalOutageDuringCompletion runs a worker process whose Temporal connection goes
// through a proxy. The activities do their work, then the proxy goes down, and only then do they
// return: their outcomes are recorded in Postgres while Temporal is unreachable, and delivered once
// it is back. No activity body runs twice.
func TestFaults_TemporalOutageDuringCompletion(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	testdb.URL(t)
	n := 10
	if faultsFull() {
		n = 40
	}
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	table := pgx.Identifier{schema, "faults_run"}.Sanitize()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(faultsRunTable, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	proxy := newFaultsProxy(t, s.Addr)
	gate, err := os.MkdirTemp("", "sluice-faults-gate-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(gate) })

	l := newLedger()
	p := startWorkerProc(t, "A", l, envFaultsWorker+"=1", envFaultsTemporal+"="+proxy.addr, envFaultsSchema+"="+schema,
		envFaultsQueue+"="+queue, envFaultsMaxConc+"="+strconv.Itoa(n), envFaultsHold+"=100ms", envFaultsGate+"="+gate)
	p.waitReady(t)
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n})
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			dumpState(t, c, pool, schema, run, l)
		}
	}()
	count := func(sql string) int {
		var k int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&k))
		return k
	}
	require.Eventually(t, func() bool { return count(`SELECT count(*) FROM `+table+` WHERE finished_at IS NOT NULL`) == n },
		3*time.Minute, 20*time.Millisecond, "every activity did its work")

	proxy.down()
	downAt := time.Now()
	require.NoError(t, os.WriteFile(filepath.Join(gate, "release"), nil, 0o644))
	tickets := pgx.Identifier{schema, "sluice_ticket"}.Sanitize()
	require.Eventually(t, func() bool {
		return count(`SELECT count(*) FROM `+tickets+` WHERE state = 'finished' AND outcome_kind = 'completed'`) == n
	}, 3*time.Minute, 20*time.Millisecond, "every outcome is recorded in Postgres while Temporal is unreachable")
	recordedIn := time.Since(downAt)
	desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, desc.WorkflowExecutionInfo.GetStatus())
	require.Len(t, desc.PendingActivities, n, "Temporal has none of the outcomes yet")
	time.Sleep(time.Until(downAt.Add(5 * time.Second)))
	require.NoError(t, proxy.up())
	upAt := time.Now()
	t.Logf("proxy down %s; outcomes recorded %s after it went down", upAt.Sub(downAt).Round(time.Millisecond), recordedIn.Round(time.Millisecond))

	var sum int
	require.NoError(t, run.Get(ctx, &sum))
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	delivered := time.Since(upAt)
	p.stopGracefully(t)
	var twice []string
	for key, r := range l.ran {
		if len(r) != 1 {
			twice = append(twice, fmt.Sprintf("%s%v", key, r))
		}
	}
	require.Len(t, l.ran, n)
	require.Empty(t, twice, "each activity body ran exactly once")
	require.Equal(t, n, count(`SELECT count(*) FROM `+table), "one recorded run per activity")
	t.Logf("workflow done %s after start, %s after Temporal came back", time.Since(start).Round(time.Millisecond), delivered.Round(time.Millisecond))
	states := faultsCheckQueue(t, ctx, q, pool)
	require.Zero(t, states["finished"], "every recorded outcome was delivered and acknowledged")
	faultsRow(t, fmt.Sprintf("Temporal unreachable for 5s between run and completion, %d activities", n), 1, n-len(l.done), len(twice), 0,
		fmt.Sprintf("Temporal back -> workflow complete: %s", delivered.Round(10*time.Millisecond)))
}

// TestFaults_BadInput feeds Sluice hostile and mistaken input. Some cases are also covered one by
// one elsewhere (TestNewPlugin_RejectsBadOptions, TestPlugin_BadCostFailsTheAttemptClearly); this
// table is the complete list.
func TestFaults_BadInput(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	pool := testdb.Pool(t)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cases := 0

	t.Run("InvalidOptions", func(t *testing.T) {
		good := faultsOptions(pool, c, testdb.NewSchemaName(), throttle.Limit{Key: "svc", MaxConcurrent: 1})
		for _, tc := range []struct {
			name string
			mod  func(*sluiceinterceptor.Options)
			want string
		}{
			{"NegativeMaxConcurrent", func(o *sluiceinterceptor.Options) { o.Limits = []throttle.Limit{{Key: "svc", MaxConcurrent: -3}} },
				`Options.Limits[0]: throttle: limit "svc": MaxConcurrent must be >= 0 (0 means no cap), got -3`},
			{"NaNRate", func(o *sluiceinterceptor.Options) {
				o.Limits = []throttle.Limit{{Key: "svc", RequestsPerSecond: math.NaN()}}
			}, `RequestsPerSecond must be a finite number, got NaN`},
			{"InfTokens", func(o *sluiceinterceptor.Options) {
				o.Limits = []throttle.Limit{{Key: "svc", TokensPerMinute: math.Inf(1)}}
			}, `TokensPerMinute must be a finite number, got +Inf`},
			{"HugeRate", func(o *sluiceinterceptor.Options) { o.Limits = []throttle.Limit{{Key: "svc", RequestsPerSecond: 1e13}} },
				`RequestsPerSecond must be <= 1e12, got 1e+13`},
			{"BurstWithoutRate", func(o *sluiceinterceptor.Options) {
				o.Limits = []throttle.Limit{{Key: "svc", MaxConcurrent: 1, Burst: 5}}
			},
				`Burst must be 0 when RequestsPerSecond is not set, got 5`},
			{"NoLimitSet", func(o *sluiceinterceptor.Options) { o.Limits = []throttle.Limit{{Key: "svc"}} },
				`limit "svc" sets none of MaxConcurrent`},
			{"DuplicateKey", func(o *sluiceinterceptor.Options) {
				o.Limits = []throttle.Limit{{Key: "svc", MaxConcurrent: 1}, {Key: "svc", MaxConcurrent: 2}}
			}, `Options.Limits[1]: key "svc" is given twice`},
			{"EmptyLimitKey", func(o *sluiceinterceptor.Options) { o.Limits = []throttle.Limit{{Key: "", MaxConcurrent: 1}} }, `Options.Limits[0]`},
			{"RouteToNothing", func(o *sluiceinterceptor.Options) { o.Routes = map[string]sluiceinterceptor.Route{"FaultWork": {}} },
				`Options.Routes["FaultWork"].Limits must name at least one limit`},
			{"MaxHeld", func(o *sluiceinterceptor.Options) { o.MaxHeld = -1 }, "Options.MaxHeld must be >= 1, got -1"},
			{"LeaseTTL", func(o *sluiceinterceptor.Options) { o.LeaseTTL = 10 * time.Millisecond }, "Options.LeaseTTL must be >= 1s, got 10ms"},
			{"PollInterval", func(o *sluiceinterceptor.Options) { o.PollInterval = time.Microsecond }, "Options.PollInterval must be >= 10ms, got 1µs"},
			{"HeartbeatInterval", func(o *sluiceinterceptor.Options) { o.HeartbeatInterval = time.Millisecond },
				"Options.HeartbeatInterval must be >= 100ms, got 1ms"},
			{"MinRemaining", func(o *sluiceinterceptor.Options) { o.MinRemaining = -time.Second }, "Options.MinRemaining must be >= 0, got -1s"},
			{"ClaimBatch", func(o *sluiceinterceptor.Options) { o.ClaimBatch = 20_000 }, "Options.ClaimBatch must be in [1, 10000], got 20000"},
			{"SelfCheckInterval", func(o *sluiceinterceptor.Options) { o.SelfCheckInterval = time.Millisecond },
				"Options.SelfCheckInterval must be >= 100ms, got 1ms"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				o := good
				tc.mod(&o)
				_, err := sluiceinterceptor.NewPlugin(o)
				require.ErrorContains(t, err, tc.want)
			})
			cases++
		}
		_, err := sluiceinterceptor.NewPlugin(good)
		require.NoError(t, err)
	})

	t.Run("HostileSchemaNames", func(t *testing.T) {
		hostile := []string{
			`sluice"; DROP SCHEMA public CASCADE; --`,
			`x; CREATE TABLE faults_pwned (id int)`,
			`sluice') OR 1=1 --`,
			"sluice\x00evil",
			`Sluice`, // upper case would need quoting: refused, not quoted
			`faults pwned`,
			strings.Repeat("a", 64),
			`pg_temp.faults_pwned`,
		}
		for _, name := range hostile {
			o := faultsOptions(pool, c, name, throttle.Limit{Key: "svc", MaxConcurrent: 1})
			_, err := sluiceinterceptor.NewPlugin(o)
			// The message says "Options.pgqueue: Schema must match": see the report.
			require.ErrorContains(t, err, "Schema must match", "%q", name)
			require.ErrorContains(t, err, strconv.Quote(name))
			_, err = pgqueue.New(pool, pgqueue.Options{Schema: name})
			require.Error(t, err, "%q", name)
			_, err = pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: name})
			require.ErrorContains(t, err, "Schema must match", "%q", name)
			cases++
		}
		var schemas, tables int
		printable := slices.DeleteFunc(slices.Clone(hostile), func(s string) bool { return strings.ContainsRune(s, 0) })
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname::text = ANY($1::text[]) OR nspname ILIKE '%pwned%'`, printable).Scan(&schemas))
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname ILIKE '%pwned%'`).Scan(&tables))
		require.Zero(t, schemas, "no schema was created")
		require.Zero(t, tables, "no table was created")
		var public int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'public'`).Scan(&public))
		require.Equal(t, 1, public, "the public schema is still there")
	})

	// One worker, shared by the runtime cases below.
	schema := testdb.Schema(t, pool)
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	svc := throttle.Limit{Key: "svc", MaxConcurrent: 2, RequestsPerSecond: 50, TokensPerMinute: 60_000}
	a := &faultActs{hold: 10 * time.Millisecond}
	opts := faultsOptions(pool, c, schema, svc)
	opts.Routes["FaultBadCostNegative"] = sluiceinterceptor.Route{Limits: []string{"svc"}, Cost: func([]any) (int64, error) { return -1, nil }}
	opts.Routes["FaultBadCostHuge"] = sluiceinterceptor.Route{Limits: []string{"svc"}, Cost: func([]any) (int64, error) { return math.MaxInt64, nil }}
	faultsStartWorker(t, c, queue, opts, a)
	one := func(in faultsOneInput) (int, error) {
		t.Helper()
		if in.StartToClose == 0 {
			in.StartToClose = time.Minute
		}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()}, FaultsOne, in)
		require.NoError(t, err)
		var v int
		err = run.Get(ctx, &v)
		return v, err
	}
	works := func(t *testing.T) {
		t.Helper()
		v, err := one(faultsOneInput{Activity: "FaultWork", X: 21, MaxAttempts: 1})
		require.NoError(t, err, "a later activity on the same worker completes")
		require.Equal(t, 42, v)
	}

	t.Run("HostileRateLimitHeaders", func(t *testing.T) {
		for _, h := range []http.Header{
			{"X-Ratelimit-Limit-Requests": {"1e308"}, "X-Ratelimit-Remaining-Requests": {"1e308"}, "X-Ratelimit-Limit-Tokens": {"1e400"}},
			{"X-Ratelimit-Limit-Tokens": {"Inf"}, "X-Ratelimit-Remaining-Tokens": {"NaN"}, "X-Ratelimit-Reset-Tokens": {"-5s"}},
			{"X-Ratelimit-Limit-Requests": {"-1"}, "X-Ratelimit-Remaining-Requests": {"0x7fffffff"}, "X-Ratelimit-Reset-Requests": {"99999999999h"}},
			{"X-Ratelimit-Limit-Tokens": {"999999999999999"}, "X-Ratelimit-Remaining-Tokens": {"999999999999999"}, "X-Ratelimit-Reset-Tokens": {"1ms"}},
			{"Anthropic-Ratelimit-Requests-Limit": {strings.Repeat("9", 10_000)}, "Anthropic-Ratelimit-Tokens-Remaining": {"1" + strings.Repeat("0", 400)}},
			{"X-Ratelimit-Limit-Requests": {"100000", "1", "abc"}, "X-Ratelimit-Remaining-Requests": {"200000"}, "Anthropic-Ratelimit-Tokens-Limit": {"1e12"}},
			{"X-Ratelimit-Limit-Tokens": {" 1e9 "}, "X-Ratelimit-Remaining-Tokens": {"1e9\r\nX-Injected: 1"}, "Retry-After": {"0.05"}},
		} {
			_, err := one(faultsOneInput{Activity: "FaultHeaders", Header: h, MaxAttempts: 1})
			require.NoError(t, err, "the headers %v", h)
			st, err := q.LimitStatus(ctx, "svc")
			require.NoError(t, err)
			cfg := svc.WithDefaults()
			require.Equal(t, cfg, st.Configured, "the configuration is untouched")
			require.Equal(t, cfg.MaxConcurrent, st.Effective.MaxConcurrent)
			require.LessOrEqual(t, st.Effective.RequestsPerSecond, cfg.RequestsPerSecond, "%v", h)
			require.LessOrEqual(t, st.Effective.Burst, cfg.Burst, "%v", h)
			require.LessOrEqual(t, st.Effective.TokensPerMinute, cfg.TokensPerMinute, "%v", h)
			require.LessOrEqual(t, st.Effective.TokenBurst, cfg.TokenBurst, "%v", h)
			require.LessOrEqual(t, st.State.Tokens.Level, cfg.TokenBurst, "%v", h)
			require.LessOrEqual(t, st.State.Requests.Level, cfg.Burst, "%v", h)
			require.False(t, math.IsNaN(st.State.Tokens.Level) || math.IsNaN(st.State.Requests.Level), "%v", h)
			require.True(t, st.State.PausedUntil.Before(time.Now().Add(throttle.MaxRetryAfter+time.Minute)), "%v", h)
			cases++
		}
		// The key still admits: the limit recovers from what the headers said.
		works(t)
		requireHealthy(t, q)
	})

	t.Run("ActivityPanics", func(t *testing.T) {
		_, err := one(faultsOneInput{Activity: "FaultPanic", MaxAttempts: 1})
		// Sluice fails the attempt with an application error of type PanicError, which Temporal's
		// failure converter turns back into a *temporal.PanicError.
		var panicErr *temporal.PanicError
		require.ErrorAs(t, err, &panicErr)
		require.ErrorContains(t, err, "activity panicked: faults: the activity panics")
		works(t)
		requireHealthy(t, q)
		cases++
	})

	t.Run("ActivityIgnoresItsDeadline", func(t *testing.T) {
		start := time.Now()
		_, err := one(faultsOneInput{Activity: "FaultIgnoreDeadline", Sleep: 4 * time.Second, StartToClose: 2 * time.Second, MaxAttempts: 1})
		var timeoutErr *temporal.TimeoutError
		require.ErrorAs(t, err, &timeoutErr, "Temporal times the attempt out")
		require.Equal(t, enumspb.TIMEOUT_TYPE_START_TO_CLOSE, timeoutErr.TimeoutType())
		t.Logf("timed out after %s", time.Since(start).Round(time.Millisecond))
		// Once the activity returns (4s after it started), its ticket is released.
		require.Eventually(t, func() bool {
			st, err := q.Status(ctx)
			if err != nil || len(st) != 1 {
				return false
			}
			m, err := ticketStates(ctx, pool, schema)
			if err != nil {
				return false
			}
			left := 0
			for _, states := range m {
				left += unfinished(states) + states["finished"]
			}
			return st[0].State.InflightCount == 0 && left == 0
		}, 3*time.Minute, 20*time.Millisecond, "the ticket is released after the activity returns")
		t.Logf("released %s after the workflow started", time.Since(start).Round(time.Millisecond))
		requireHealthy(t, q)
		works(t)
		cases++
	})

	t.Run("BadCost", func(t *testing.T) {
		for name, want := range map[string]string{
			"FaultBadCostNegative": fmt.Sprintf(`Routes["FaultBadCostNegative"].Cost must return a value in [0, %d], got -1`, pgqueue.MaxCost),
			"FaultBadCostHuge":     fmt.Sprintf(`Routes["FaultBadCostHuge"].Cost must return a value in [0, %d], got %d`, pgqueue.MaxCost, int64(math.MaxInt64)),
		} {
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
				FaultsOne, faultsOneInput{Activity: name, StartToClose: time.Minute}) // unlimited attempts
			require.NoError(t, err)
			err = run.Get(ctx, nil)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr, name)
			require.Equal(t, "SluiceBadCost", appErr.Type())
			require.True(t, appErr.NonRetryable(), "%s: not retried", name)
			require.ErrorContains(t, err, want)
			cases++
		}
		requireHealthy(t, q)
	})

	t.Run("MigrateTwice", func(t *testing.T) {
		fresh := testdb.NewSchemaName()
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{fresh}.Sanitize()+` CASCADE`)
		})
		first, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: fresh})
		require.NoError(t, err)
		require.NotEmpty(t, first.Applied)
		second, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: fresh})
		require.NoError(t, err)
		require.Empty(t, second.Applied, "the second run is a no-op")
		require.Equal(t, first.Version, second.Version)
		cases++
	})

	b := &faultActs{hold: 20 * time.Millisecond} // the activities of the two-configuration case
	var sharedLeft map[string]int                // its tickets left by state
	t.Run("TwoConfigurationsOneSchema", func(t *testing.T) {
		shared := testdb.Schema(t, pool)
		sq, err := pgqueue.New(pool, pgqueue.Options{Schema: shared})
		require.NoError(t, err)
		o1 := faultsOptions(pool, c, shared, throttle.Limit{Key: "svc", MaxConcurrent: 2})
		o2 := faultsOptions(pool, c, shared, throttle.Limit{Key: "svc", MaxConcurrent: 3, RequestsPerSecond: 100}, throttle.Limit{Key: "other", MaxConcurrent: 1})
		o2.PollInterval, o2.ClaimBatch = 50*time.Millisecond, 7
		q1, q2 := queue+"-one", queue+"-two"
		faultsStartWorker(t, c, q1, o1, b)
		faultsStartWorker(t, c, q2, o2, b) // started later: its UpsertLimits wins
		got, err := sq.Limit(ctx, "svc")
		require.NoError(t, err)
		require.Equal(t, throttle.Limit{Key: "svc", MaxConcurrent: 3, RequestsPerSecond: 100}.WithDefaults(), got)
		var wg sync.WaitGroup
		for _, tq := range []string{q1, q2} {
			wg.Go(func() {
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq, ID: "wf-" + testdb.NewSchemaName()},
					FaultsFanOut, faultsFanOutInput{N: 20})
				if !faultsNoError(t, err) {
					return
				}
				var sum int
				if faultsNoError(t, run.Get(ctx, &sum)) && sum != 20*19 {
					t.Errorf("task queue %s: sum %d, want %d", tq, sum, 20*19)
				}
			})
		}
		wg.Wait()
		require.LessOrEqual(t, b.peak.Load(), int64(3), "the limit in force, across both plugins")
		sharedLeft = faultsCheckQueue(t, ctx, sq, pool)
		cases++
	})
	if t.Failed() {
		return
	}

	// The row's figures, measured: tickets left unfinished, activities whose body ran more than once,
	// and limits exceeded as the activities saw them (svc allows 2 at once on the shared worker, and
	// 3 in the two-configuration case).
	left := faultsCheckQueue(t, ctx, q, pool)
	lost := unfinished(left) + unfinished(sharedLeft)
	twice := 0
	for _, acts := range []*faultActs{a, b} {
		acts.runs.Range(func(_, v any) bool {
			if v.(*atomic.Int64).Load() > 1 {
				twice++
			}
			return true
		})
	}
	violations := max(0, int(a.peak.Load())-svc.MaxConcurrent) + max(0, int(b.peak.Load())-3)
	require.Zero(t, twice, "no activity body ran twice")
	faultsRow(t, fmt.Sprintf("bad input: %d cases (options, hostile schemas, hostile headers, panic, ignored deadline, bad cost, migrate twice, two configs)", cases),
		cases, lost, twice, violations, "n/a")
}

func faultsNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
