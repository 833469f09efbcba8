package interceptor_test

// Fault-tolerance scenarios: worker processes killed at random, a Postgres restart, a Temporal
// outage while outcomes wait for delivery, and hostile input. Each runs real processes (worker
// subprocesses, a private Postgres cluster, the Temporal dev server) and ends with the invariant
// checks: q.Verify clean, no ticket left queued, admitted or running, and no limit exceeded as the
// activities themselves observed it.
//
// The tests run in a short configuration by default (make test); SLUICE_FAULTS=full selects the long
// form (make test-faults). Each logs a FAULTS-ROW line: the row of the fault table in docs/faults.md.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
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
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
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
	// stubborn, closed by the test, ends FaultIgnoreDeadline's work.
	stubborn chan struct{}
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

// FaultIgnoreDeadline works until the test closes a.stubborn, whatever its context says.
func (a *faultActs) FaultIgnoreDeadline(ctx context.Context) error {
	if a.stubborn == nil {
		return errors.New("faults: FaultIgnoreDeadline needs faultActs.stubborn")
	}
	<-a.stubborn
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
	Header       http.Header // FaultHeaders
	X            int         // FaultWork
}

// FaultsOne runs one activity.
func FaultsOne(ctx workflow.Context, in faultsOneInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: in.StartToClose,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: in.MaxAttempts},
	})
	var args []any
	switch in.Activity {
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
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
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
func faultsCheckQueue(t *testing.T, ctx context.Context, q *store.Queue, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	// A workflow hears its last activity's outcome before that run's completion commits: wait for
	// the completions (a ticket truly left behind still fails, once the wait runs out).
	requireSettled(t, ctx, q)
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

// faultsRow logs the scenario's row of the fault table in docs/faults.md.
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

func faultsNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
