package interceptor_test

// The fault scenario of hostile and mistaken input; the harness is in faults_test.go.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

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
			_, err = store.New(pool, store.Options{Schema: name})
			require.Error(t, err, "%q", name)
			_, err = store.Migrate(ctx, pool, store.MigrateOptions{Schema: name})
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
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	queue := "q-" + testdb.NewSchemaName()
	svc := throttle.Limit{Key: "svc", MaxConcurrent: 2, RequestsPerSecond: 50, TokensPerMinute: 60_000}
	a := &faultActs{hold: 10 * time.Millisecond, stubborn: make(chan struct{})}
	endStubbornWork := sync.OnceFunc(func() { close(a.stubborn) })
	t.Cleanup(endStubbornWork) // a failed case must not leave the activity running
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
		_, err := one(faultsOneInput{Activity: "FaultIgnoreDeadline", StartToClose: 2 * time.Second, MaxAttempts: 1})
		var timeoutErr *temporal.TimeoutError
		require.ErrorAs(t, err, &timeoutErr, "Temporal times the attempt out")
		require.Equal(t, enumspb.TIMEOUT_TYPE_START_TO_CLOSE, timeoutErr.TimeoutType())
		t.Logf("timed out after %s", time.Since(start).Round(time.Millisecond))
		// The activity still works past its deadline: its ticket keeps the slot until it returns.
		st, err := q.LimitStatus(ctx, "svc")
		require.NoError(t, err)
		require.Equal(t, 1, st.State.InflightCount, "the run that ignores its deadline still holds its slot")
		endStubbornWork()
		// Once the activity returns, its ticket is released. Polled: the release is the plugin's (the
		// run's completion, then its delivery, which Temporal answers NotFound) and signals nothing the
		// test can wait on.
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
			"FaultBadCostNegative": fmt.Sprintf(`Routes["FaultBadCostNegative"].Cost must return a value in [0, %d], got -1`, store.MaxCost),
			"FaultBadCostHuge":     fmt.Sprintf(`Routes["FaultBadCostHuge"].Cost must return a value in [0, %d], got %d`, store.MaxCost, int64(math.MaxInt64)),
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
		first, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: fresh})
		require.NoError(t, err)
		require.NotEmpty(t, first.Applied)
		second, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: fresh})
		require.NoError(t, err)
		require.Empty(t, second.Applied, "the second run is a no-op")
		require.Equal(t, first.Version, second.Version)
		cases++
	})

	b := &faultActs{hold: 20 * time.Millisecond} // the activities of the two-configuration case
	var sharedLeft map[string]int                // its tickets left by state
	t.Run("TwoConfigurationsOneSchema", func(t *testing.T) {
		shared := testdb.Schema(t, pool)
		sq, err := store.New(pool, store.Options{Schema: shared})
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
