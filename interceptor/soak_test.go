package interceptor_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"runtime"
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
	"github.com/sluicehq/sluice/internal/testkit/faultproxy"
	"github.com/sluicehq/sluice/internal/testkit/pgcluster"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// The soak (make soak; SLUICE_SOAK=30m): 8 worker processes over 4 provider lines and 100 tenant
// keys with caps, rates and token budgets, a steady stream of workflows through the dev server, and
// faults at random: a lost answer to a claim's, a take's, a completion's, an enqueue's or a requeue's
// COMMIT (faultproxy between the workers and Postgres), every connection reset, a Postgres restart,
// a SIGKILL of a worker, a CPU burner. At the end it checks and prints: every workflow completed
// with the right sum, each activity body's runs accounted for, Verify clean, no window above any
// limit, nothing running without a holder.

const (
	envSoakWorker = "SLUICE_SOAK_WORKER" // "1": act as a soak worker process
	envSoakRecord = "SLUICE_SOAK_RECORD" // the URL the activities record their runs through (not the proxy)
	soakLines     = 4
	soakTenants   = 100
	soakReplicas  = 8
)

// soakLine is provider line i's limit; soakTenant is a tenant's, drawn on beside its line's.
func soakLine(i int) throttle.Limit {
	return throttle.Limit{Key: fmt.Sprintf("svc%d", i), MaxConcurrent: 12, RequestsPerSecond: 15, Burst: 5,
		TokensPerMinute: 120_000, TokenBurst: 4_000}
}

func soakTenant(id string) throttle.Limit {
	return throttle.Limit{Key: "tenant:" + id, MaxConcurrent: 2, RequestsPerSecond: 4, Burst: 2,
		TokensPerMinute: 30_000, TokenBurst: 1_500}
}

func init() {
	if os.Getenv(envSoakWorker) != "1" {
		return
	}
	if err := soakWorkerProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice soak worker:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// SoakInput is one activity call of the soak.
type SoakInput struct {
	Tenant  string
	Tokens  int64
	Hold    time.Duration
	Limited bool // the provider answers 429 to its first run of each attempt
	X       int
}

// soakRunTable records each run of an activity body, with the database clock.
const soakRunTable = `CREATE TABLE %s.soak_run (id bigserial PRIMARY KEY, act text NOT NULL, proc text NOT NULL,
	attempt int NOT NULL, line text NOT NULL, tenant text NOT NULL, outcome text,
	started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz)`

type soakActs struct {
	stop    context.Context // the worker process's: done at SIGTERM
	rec     *pgxpool.Pool
	table   string
	proc    string
	limited sync.Map // act#attempt -> refused once already
}

func (a *soakActs) work(line string) func(context.Context, SoakInput) (int, error) {
	return func(ctx context.Context, in SoakInput) (int, error) {
		info := activity.GetInfo(ctx)
		act := info.WorkflowExecution.ID + "/" + info.ActivityID
		var id int64
		if err := a.rec.QueryRow(ctx, `INSERT INTO `+a.table+` (act, proc, attempt, line, tenant) VALUES ($1, $2, $3, $4, $5)
			RETURNING id`, act, a.proc, info.Attempt, line, in.Tenant).Scan(&id); err != nil {
			return 0, fmt.Errorf("record run: %w", err)
		}
		finish := func(outcome string) {
			// The recording database may be restarting (a soak fault): retry with a backoff, until
			// the worker is told to stop. A run whose end is never recorded is counted as such.
			for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
				_, err := a.rec.Exec(context.WithoutCancel(ctx), `UPDATE `+a.table+` SET finished_at = clock_timestamp(), outcome = $2
					WHERE id = $1`, id, outcome)
				if err == nil {
					return
				}
				select {
				case <-a.stop.Done():
					return
				case <-time.After(backoff):
				}
			}
		}
		select {
		case <-ctx.Done():
			finish("cancelled")
			return 0, ctx.Err()
		case <-time.After(in.Hold):
		}
		if _, refused := a.limited.LoadOrStore(fmt.Sprint(act, "#", info.Attempt), true); in.Limited && !refused {
			finish("limited")
			return 0, sluiceactivity.RateLimitedFor(ctx, 200*time.Millisecond)
		}
		_ = sluiceactivity.ReportTokens(ctx, in.Tokens*3/4, in.Tokens/4)
		finish("done")
		return in.X, nil
	}
}

// SoakWorkflow runs its calls at once, each on line i%soakLines, and returns the sum of their X.
func SoakWorkflow(ctx workflow.Context, calls []SoakInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 20 * time.Minute, HeartbeatTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 1.5, MaximumInterval: 5 * time.Second},
	})
	fs := make([]workflow.Future, len(calls))
	for i, c := range calls {
		fs[i] = workflow.ExecuteActivity(ctx, fmt.Sprintf("SoakWork%d", i%soakLines), c)
	}
	sum := 0
	for _, f := range fs {
		var v int
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func soakOptions(pool *pgxpool.Pool, c client.Client, schema string) sluiceinterceptor.Options {
	routes := map[string]sluiceinterceptor.Route{}
	var limits []throttle.Limit
	for i := range soakLines {
		l := soakLine(i)
		limits = append(limits, l)
		routes[fmt.Sprintf("SoakWork%d", i)] = sluiceinterceptor.Route{Limits: []string{l.Key},
			Cost:        func(args []any) (int64, error) { return args[0].(SoakInput).Tokens, nil },
			FairnessKey: func(_ sluiceinterceptor.ActivityInfo, args []any) string { return args[0].(SoakInput).Tenant },
			KeyLimits: func(_ sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
				return []throttle.Limit{soakTenant(args[0].(SoakInput).Tenant)}
			}}
	}
	return sluiceinterceptor.Options{Pool: pool, Client: c, Schema: schema, Limits: limits, Routes: routes,
		PollInterval: 200 * time.Millisecond, HeartbeatInterval: 2 * time.Second, SelfCheckInterval: 2 * time.Second}
}

func soakWorkerProcess() error {
	go func() { // the parent died without killing this process
		buf := make([]byte, 1)
		_, _ = os.Stdin.Read(buf)
		os.Exit(3)
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	name, schema, queue := os.Getenv(envName), os.Getenv(envSchema), os.Getenv(envQueue)
	pool, c, closeAll, err := dialWorkerProcess(ctx, os.Getenv("TEST_DATABASE_URL"), os.Getenv(envTemporal), "sluice-soak-"+name)
	if err != nil {
		return err
	}
	defer closeAll()
	recCfg, err := pgxpool.ParseConfig(os.Getenv(envSoakRecord))
	if err != nil {
		return err
	}
	recCfg.MaxConns = 4
	rec, err := pgxpool.NewWithConfig(ctx, recCfg)
	if err != nil {
		return err
	}
	defer rec.Close()
	opts := soakOptions(pool, c, schema)
	opts.Identity = fmt.Sprintf("sluice-soak-%s@%d", name, os.Getpid())
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	plugin, err := sluiceinterceptor.NewPlugin(opts)
	if err != nil {
		return err
	}
	fmt.Printf("OWNER %s\n", plugin.Owner())
	a := &soakActs{stop: ctx, rec: rec, table: pgx.Identifier{schema, "soak_run"}.Sanitize(), proc: name}
	w := worker.New(c, queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin},
		WorkerStopTimeout: 10 * time.Second})
	w.RegisterWorkflow(SoakWorkflow)
	for i := range soakLines {
		w.RegisterActivityWithOptions(a.work(soakLine(i).Key), activity.RegisterOptions{Name: fmt.Sprintf("SoakWork%d", i)})
	}
	if err := w.Start(); err != nil {
		return err
	}
	fmt.Println("READY")
	<-ctx.Done()
	w.Stop()
	fmt.Println("STOPPED")
	return nil
}

// soakFaults injects one fault of a random kind at a time and counts them by kind.
type soakFaults struct {
	t       *testing.T
	proxy   *faultproxy.Proxy
	cluster *pgcluster.Cluster
	kill    func() // SIGKILLs a random worker and starts its replacement

	mu     sync.Mutex
	counts map[string]int
}

func (f *soakFaults) count(kind string) {
	f.mu.Lock()
	f.counts[kind]++
	f.mu.Unlock()
}

// lostAnswers are the commits whose answer a fault loses, by what their transaction does.
var lostAnswers = map[string]func(faultproxy.RoundTrip) bool{
	"claim commit answer lost":    func(r faultproxy.RoundTrip) bool { return r.Commits() && r.Contains("SET state = CASE WHEN") },
	"take commit answer lost":     func(r faultproxy.RoundTrip) bool { return r.Commits() && r.TxContains("SET state = 'running'") },
	"complete commit answer lost": func(r faultproxy.RoundTrip) bool { return r.Commits() && r.TxContains(".sluice_release (key, count") },
	"enqueue commit answer lost": func(r faultproxy.RoundTrip) bool {
		return r.Commits() && r.TxContains(".sluice_ticket (state, line_key")
	},
	"requeue commit answer lost": func(r faultproxy.RoundTrip) bool { return r.Commits() && r.TxContains("requeues = requeues + 1") },
}

func (f *soakFaults) inject(ctx context.Context) {
	kinds := []string{"proxy reset", "postgres restart", "sigkill", "cpu burner"}
	for k := range lostAnswers {
		kinds = append(kinds, k)
	}
	kind := kinds[rand.N(len(kinds))]
	switch kind {
	case "proxy reset":
		f.proxy.Reset()
	case "postgres restart":
		require.NoError(f.t, f.cluster.Stop("fast"))
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		require.NoError(f.t, f.cluster.Start())
	case "sigkill":
		f.kill()
	case "cpu burner":
		burn, stop := context.WithTimeout(ctx, 20*time.Second)
		defer stop()
		var wg sync.WaitGroup
		for range runtime.NumCPU() {
			wg.Go(func() {
				for burn.Err() == nil {
					for i := 0; i < 1e6; i++ {
						_ = i * i
					}
				}
			})
		}
		wg.Wait()
	default:
		fault := f.proxy.Arm(faultproxy.AfterRun, lostAnswers[kind])
		select {
		case <-fault.Fired():
		case <-time.After(30 * time.Second):
			f.proxy.Disarm()
			kind += " (armed; no such commit within 30s)"
		case <-ctx.Done():
			return
		}
	}
	f.count(kind)
}

func TestSoak(t *testing.T) {
	d := os.Getenv("SLUICE_SOAK")
	if d == "" {
		t.Skip("the soak runs with make soak (SLUICE_SOAK=30m)")
	}
	soakFor, err := time.ParseDuration(d)
	require.NoError(t, err)
	s := temporaltest.Require(t, server)
	cluster := pgcluster.Start(t)
	cfg, err := pgxpool.ParseConfig(cluster.URL)
	require.NoError(t, err)
	pool := testdb.PoolWith(t, cfg)
	schema := testdb.Schema(t, pool)
	table := pgx.Identifier{schema, "soak_run"}.Sanitize()
	_, err = pool.Exec(context.Background(), fmt.Sprintf(soakRunTable, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	proxy, err := faultproxy.Start(hostPort(cfg))
	require.NoError(t, err)
	defer proxy.Close()
	through, err := url.Parse(proxy.URL(cluster.URL))
	require.NoError(t, err)
	qs := through.Query()
	qs.Set("sslmode", "disable")
	through.RawQuery = qs.Encode()
	c := s.Client(t)
	queue := "soak-" + testdb.NewSchemaName()
	ctx, cancel := context.WithTimeout(context.Background(), soakFor+30*time.Minute)
	defer cancel()

	l := newLedger()
	procEnv := []string{envSoakWorker + "=1", "TEST_DATABASE_URL=" + through.String(), envSoakRecord + "=" + cluster.URL,
		envTemporal + "=" + s.Addr, envSchema + "=" + schema, envQueue + "=" + queue}
	var (
		procMu sync.Mutex
		live   []*workerProc
		next   int
		killed = map[string]time.Time{}
	)
	spawn := func() *workerProc {
		procMu.Lock()
		name := fmt.Sprintf("W%02d", next)
		next++
		procMu.Unlock()
		p := startWorkerProc(t, name, l, procEnv...)
		p.waitReady(t)
		return p
	}
	for range soakReplicas {
		live = append(live, spawn())
	}
	faults := &soakFaults{t: t, proxy: proxy, cluster: cluster, counts: map[string]int{}}
	faults.kill = func() {
		procMu.Lock()
		i := rand.N(len(live))
		p := live[i]
		procMu.Unlock()
		require.NoError(t, p.cmd.Process.Kill())
		<-p.exited
		at := time.Now()
		// Its runs ended at the latest now; each is a run the kill cut short.
		_, err := pool.Exec(ctx, `UPDATE `+table+` SET finished_at = greatest(started_at, clock_timestamp()), outcome = 'killed'
			WHERE proc = $1 AND finished_at IS NULL`, p.name)
		require.NoError(t, err)
		np := spawn()
		procMu.Lock()
		killed[p.name] = at
		live[i] = np
		procMu.Unlock()
	}

	// The stream: up to 24 workflows of 8 calls at a time, started until the soak's time is up.
	var (
		started, completed, failed atomic.Int64
		activities                 atomic.Int64
		wg                         sync.WaitGroup
		failures                   sync.Map
	)
	streamEnd := time.Now().Add(soakFor)
	slots := make(chan struct{}, 24)
	wg.Go(func() {
		for i := 0; time.Now().Before(streamEnd); i++ {
			slots <- struct{}{}
			calls := make([]SoakInput, 8)
			want := 0
			for j := range calls {
				calls[j] = SoakInput{Tenant: fmt.Sprintf("t%02d", rand.N(soakTenants)), Tokens: 100 + rand.Int64N(1400),
					Hold: time.Duration(20+rand.N(180)) * time.Millisecond, Limited: rand.N(30) == 0, X: i*8 + j}
				want += calls[j].X
			}
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: fmt.Sprintf("soak-%06d", i)}, SoakWorkflow, calls)
			if err != nil {
				failures.Store(fmt.Sprintf("soak-%06d", i), err.Error())
				failed.Add(1)
				<-slots
				continue
			}
			started.Add(1)
			activities.Add(int64(len(calls)))
			wg.Go(func() {
				defer func() { <-slots }()
				var sum int
				err := run.Get(ctx, &sum)
				switch {
				case err != nil:
					failures.Store(run.GetID(), err.Error())
					failed.Add(1)
				case sum != want:
					failures.Store(run.GetID(), fmt.Sprintf("sum %d, want %d", sum, want))
					failed.Add(1)
				default:
					completed.Add(1)
				}
			})
		}
	})
	// Faults, one every 10-40s, while the stream runs.
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for time.Now().Before(streamEnd.Add(-10 * time.Second)) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(10+rand.N(30)) * time.Second):
			}
			faults.inject(ctx)
		}
	}()
	// Stuck tickets: running under a live owner with no unfinished run of its attempt, seen so at
	// samples 30s apart with the same admission.
	stuck := map[string]bool{}
	var stuckMu sync.Mutex
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		seen := map[string]time.Time{}
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Second):
			}
			rows, err := pool.Query(ctx, `SELECT t.workflow_id || '/' || t.activity_id || '#' || t.attempt || '@' || t.admitted_at
				FROM `+pgx.Identifier{schema, "sluice_ticket"}.Sanitize()+` t
				WHERE t.state = 'running' AND NOT EXISTS (SELECT 1 FROM `+table+` r
					WHERE r.act = t.workflow_id || '/' || t.activity_id AND r.attempt = t.attempt AND r.finished_at IS NULL)`)
			if err != nil {
				continue // Postgres restarting
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				continue
			}
			now := time.Now()
			next := map[string]time.Time{}
			for _, k := range keys {
				first, ok := seen[k]
				if !ok {
					first = now
				}
				next[k] = first
				if now.Sub(first) > 30*time.Second {
					stuckMu.Lock()
					stuck[k] = true
					stuckMu.Unlock()
				}
			}
			seen = next
		}
	}()

	<-faultsDone
	wg.Wait()
	close(stopSampling)
	<-sampled
	procMu.Lock()
	for _, p := range live {
		p.stopGracefully(t)
	}
	procMu.Unlock()

	report := soakReport(t, ctx, pool, q, schema, killed)
	lines := []string{
		fmt.Sprintf("soak: %s, %d worker processes (%d started in all), %d lines and %d tenant keys", soakFor, soakReplicas, next, soakLines, soakTenants),
		fmt.Sprintf("workflows: started %d, completed with the right sum %d, failed %d", started.Load(), completed.Load(), failed.Load()),
		fmt.Sprintf("activities: %d; runs of their bodies: %d", activities.Load(), report.runs),
	}
	faults.mu.Lock()
	for k, n := range faults.counts {
		lines = append(lines, fmt.Sprintf("fault: %s x %d", k, n))
	}
	faults.mu.Unlock()
	for cause, n := range report.repeats {
		lines = append(lines, fmt.Sprintf("repeated runs: %d, %s", n, cause))
	}
	for _, u := range report.unexplained {
		lines = append(lines, "unexplained repeat: "+u)
	}
	lines = append(lines,
		fmt.Sprintf("lost: %d", activities.Load()-completed.Load()*8),
		fmt.Sprintf("over-admission windows: %d %v", len(report.over), report.over),
		fmt.Sprintf("stuck: %d %v", len(stuck), keysOf(stuck)),
		fmt.Sprintf("left unfinished: %v", report.states))
	for _, line := range lines {
		fmt.Println("SOAK |", line)
		t.Log(line)
	}
	failures.Range(func(k, v any) bool { t.Errorf("workflow %v: %v", k, v); return true })
	require.Zero(t, failed.Load())
	require.Equal(t, started.Load(), completed.Load(), "every workflow completed")
	require.Empty(t, report.over, "no window above any limit")
	require.Empty(t, stuck, "nothing left running without a holder")
	require.Zero(t, report.repeats["unexplained"], "every repeated run has a cause")
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// hostPort is cfg's host:port.
func hostPort(cfg *pgxpool.Config) string {
	return cfg.ConnConfig.Host + ":" + strconv.Itoa(int(cfg.ConnConfig.Port))
}

type soakResult struct {
	runs        int
	repeats     map[string]int
	unexplained []string // each repeated run without a cause: the activity and its runs
	over        []string
	states      map[string]int
}

// soakReport checks the database after the soak: the queue (Verify clean, nothing unfinished), the
// runs each activity's body made and why those that ran more than once did, and every window of
// every limit.
func soakReport(t *testing.T, ctx context.Context, pool *pgxpool.Pool, q *store.Queue, schema string, killed map[string]time.Time) soakResult {
	t.Helper()
	res := soakResult{repeats: map[string]int{}}
	res.states = faultsCheckQueue(t, ctx, q, pool)
	table := pgx.Identifier{schema, "soak_run"}.Sanitize()

	// Runs, in order, per activity: each run after the first is explained by how the one before it
	// ended.
	rows, err := pool.Query(ctx, `SELECT act, attempt, proc, coalesce(outcome, '') FROM `+table+` ORDER BY act, id`)
	require.NoError(t, err)
	type run struct {
		act, proc, outcome string
		attempt            int
	}
	var prev run
	for rows.Next() {
		var r run
		require.NoError(t, rows.Scan(&r.act, &r.attempt, &r.proc, &r.outcome))
		res.runs++
		if r.act == prev.act {
			cause := repeatCause(prev.outcome, prev.attempt, r.attempt, killed[prev.proc])
			res.repeats[cause]++
			if cause == "unexplained" {
				res.unexplained = append(res.unexplained, fmt.Sprintf("%s: %s#%d %q then %s#%d %q",
					r.act, prev.proc, prev.attempt, prev.outcome, r.proc, r.attempt, r.outcome))
			}
		}
		prev = r
	}
	require.NoError(t, rows.Err())

	// Concurrency: the runs' own intervals, per line and per tenant, never above MaxConcurrent.
	over := func(col string, limit func(string) int) {
		rows, err := pool.Query(ctx, `WITH ev AS (
				SELECT `+col+` AS k, started_at AS at, 1 AS d FROM `+table+` WHERE finished_at IS NOT NULL
				UNION ALL SELECT `+col+`, finished_at, -1 FROM `+table+` WHERE finished_at IS NOT NULL)
			SELECT k, max(c) FROM (SELECT k, sum(d) OVER (PARTITION BY k ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS c FROM ev) x GROUP BY k`)
		require.NoError(t, err)
		for rows.Next() {
			var k string
			var n int
			require.NoError(t, rows.Scan(&k, &n))
			if n > limit(k) {
				res.over = append(res.over, fmt.Sprintf("%s concurrency %d > %d", k, n, limit(k)))
			}
		}
		require.NoError(t, rows.Err())
	}
	over("line", func(string) int { return soakLine(0).MaxConcurrent })
	over("tenant", func(string) int { return soakTenant("").MaxConcurrent })

	// Rates and token budgets: what was admitted in each second (sluice_usage) is at most the burst
	// plus a second's refill.
	rows, err = pool.Query(ctx, `SELECT key, second, requests, tokens FROM `+pgx.Identifier{schema, "sluice_usage"}.Sanitize())
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var at time.Time
		var requests, tokens int64
		require.NoError(t, rows.Scan(&key, &at, &requests, &tokens))
		l := soakTenant("")
		if len(key) > 3 && key[:3] == "svc" {
			l = soakLine(0)
		}
		if float64(requests) > float64(l.Burst)+l.RequestsPerSecond {
			res.over = append(res.over, fmt.Sprintf("%s at %s: %d requests > burst %g + %g/s", key, at.Format(time.TimeOnly), requests, l.Burst, l.RequestsPerSecond))
		}
		if float64(tokens) > float64(l.TokenBurst)+l.TokensPerMinute/60 {
			res.over = append(res.over, fmt.Sprintf("%s at %s: %d tokens > burst %g + %g/s", key, at.Format(time.TimeOnly), tokens, l.TokenBurst, l.TokensPerMinute/60))
		}
	}
	require.NoError(t, rows.Err())
	return res
}

// repeatCause explains a run of an activity after a run that ended with outcome prevOutcome.
func repeatCause(prevOutcome string, prevAttempt, attempt int, prevProcKilled time.Time) string {
	switch {
	case prevOutcome == "limited" && attempt == prevAttempt:
		return "the run before answered 429: requeued in the same attempt (by design)"
	case prevOutcome == "limited" && attempt > prevAttempt:
		return "the run before answered 429 and its requeue's answer was lost: handed back, Temporal retried it"
	case prevOutcome == "killed":
		return "the run before was cut short by a SIGKILL of its worker: Temporal retried it"
	case prevOutcome == "cancelled":
		return "the run before was cancelled (its attempt timed out or was handed back): Temporal retried it"
	case !prevProcKilled.IsZero():
		return "the run before finished on a worker SIGKILLed before its outcome was recorded: Temporal retried it"
	case prevOutcome == "done" && attempt > prevAttempt:
		return "the run before finished but its attempt was handed back or timed out before its outcome reached Temporal"
	case prevOutcome == "":
		return "the run before never recorded its end (the recording database was restarting)"
	}
	return "unexplained"
}
