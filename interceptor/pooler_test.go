package interceptor_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/pgbouncer"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// TestPlugin_ConnectionBudget runs workers on the connection budget the docs state, a pool of 2
// connections: directly (plus the listener's own connection), and through a real PgBouncer in
// transaction mode, where Sluice keeps no session state (it polls, or listens on a direct
// connection). Every activity completes once, the limit holds, and the queue is left clean.
func TestPlugin_ConnectionBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		pooled, listens bool
	}{
		{name: "direct pool of 2", listens: true},
		{name: "pgbouncer, polling", pooled: true},
		{name: "pgbouncer, listening directly", pooled: true, listens: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			e := newEnv(t, &acts{hold: 5 * time.Millisecond})
			opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 4})
			opts.PollInterval = 0 // the default of the mode under test
			app := "sluice-listen-" + e.schema
			if tc.pooled {
				b := pgbouncer.Start(t, testdb.URL(t), pgbouncer.Options{PoolSize: 4})
				opts.Pool, opts.TransactionPooler = poolOf2(t, b.URL), true
				if tc.listens {
					opts.ListenURL = withParam(testdb.URL(t), "application_name", app)
				}
			} else {
				opts.Pool = poolOf2(t, withParam(testdb.URL(t), "application_name", app))
			}
			for range 2 {
				e.startWorker(t, opts)
			}
			run, err := e.run(t, ctx, FanOut, fanOutInput{N: 60})
			require.NoError(t, err)
			var sum int
			require.NoError(t, run.Get(ctx, &sum))
			require.Equal(t, 2*(59*60/2), sum, "every activity completed with the right result")
			require.LessOrEqual(t, e.acts.peak.Load(), int64(4), "the limit held")
			e.acts.calls.Range(func(k, v any) bool {
				require.EqualValues(t, 1, v.(interface{ Load() int64 }).Load(), "activity %v ran once", k)
				return true
			})
			requireHealthy(t, e.q)
			var listening int
			require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&listening))
			if tc.listens {
				require.Equal(t, 2, listening, "each worker listens on a connection of its own")
			} else {
				require.Zero(t, listening)
			}
		})
	}
}

// poolOf2 is a pool of at most 2 connections on url, closed at the end of the test.
func poolOf2(t *testing.T, url string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 2
	return testdb.PoolWith(t, cfg)
}

// withParam adds a query parameter to a postgres:// URL.
func withParam(url, name, value string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%s%s=%s", url, sep, name, value)
}

func TestNewPlugin_RefusesCachedStatementsBehindATransactionPooler(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.TransactionPooler = true // e.pool keeps pgx's default, QueryExecModeCacheStatement
	_, err := sluiceinterceptor.NewPlugin(opts)
	require.ErrorContains(t, err, "Options.TransactionPooler is set but Options.Pool's DefaultQueryExecMode is cache_statement")
	require.ErrorContains(t, err, "default_query_exec_mode=exec")

	opts.TransactionPooler, opts.ListenURL = false, "postgres://%zz"
	_, err = sluiceinterceptor.NewPlugin(opts)
	require.ErrorContains(t, err, "Options.ListenURL is not a Postgres URL or DSN")
}

// TestPlugin_RefusesAnUndeclaredTransactionPooler starts the plugin as the quickstart does, over a
// pool through a real PgBouncer in transaction mode with Options.TransactionPooler left unset: the
// start is refused with ErrTransactionPooler, whatever the pool's exec mode, and whether or not
// PgBouncer's server connections hold another client's prepared statements (where the migration
// failed with SQLSTATE 42P05). A direct pool, and one through PgBouncer in session mode, pass the
// check and start. No Temporal server is
// needed: the test calls the plugin's StartWorker itself, as a worker's Start does.
func TestPlugin_RefusesAnUndeclaredTransactionPooler(t *testing.T) {
	t.Parallel()
	type testBundle struct {
		direct *pgxpool.Pool
		opts   sluiceinterceptor.Options
		logs   *tallyState // the plugin's warnings
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		direct := testdb.Pool(t)
		c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: temporaltest.QuietLogger()})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		logs := &tallyState{}
		return &testBundle{direct: direct, logs: logs, opts: sluiceinterceptor.Options{
			Pool: direct, Client: c, Schema: testdb.Schema(t, direct),
			Logger: slog.New(logTally{next: testenv.Logger(t).Handler(), s: logs}),
			Limits: []throttle.Limit{{Key: "svc", MaxConcurrent: 1}},
			Routes: map[string]sluiceinterceptor.Route{"Double": {Limits: []string{"svc"}}},
		}}
	}
	// start starts the plugin as a worker's Start does, stopped at the end of the test if it started.
	start := func(t *testing.T, opts sluiceinterceptor.Options) error {
		t.Helper()
		plugin, err := sluiceinterceptor.NewPlugin(opts)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = plugin.StartWorker(ctx, worker.PluginStartWorkerOptions{},
			func(context.Context, worker.PluginStartWorkerOptions) error { return nil })
		if err == nil {
			t.Cleanup(func() {
				plugin.StopWorker(context.Background(), worker.PluginStopWorkerOptions{}, func(context.Context, worker.PluginStopWorkerOptions) {})
			})
		}
		return err
	}
	requireRefused := func(t *testing.T, err error) {
		t.Helper()
		t.Logf("start refused: %v", err)
		require.ErrorIs(t, err, sluiceinterceptor.ErrTransactionPooler)
		require.ErrorContains(t, err, "set Options.TransactionPooler")
		require.ErrorContains(t, err, "default_query_exec_mode=exec")
		require.ErrorContains(t, err, "Connections and poolers")
	}
	// bouncedIn is a pool through a fresh PgBouncer in pool mode mode in front of the test database,
	// in pgx's default exec mode (cache_statement, as the quickstart leaves it) unless exec.
	bouncedIn := func(t *testing.T, mode string, exec bool) *pgxpool.Pool {
		t.Helper()
		url := pgbouncer.Start(t, testdb.URL(t), pgbouncer.Options{PoolSize: 4, PoolMode: mode}).URL
		if !exec {
			url = strings.Replace(url, "&default_query_exec_mode=exec", "", 1)
		}
		return poolOf2(t, url)
	}
	bounced := func(t *testing.T, exec bool) *pgxpool.Pool {
		t.Helper()
		return bouncedIn(t, "transaction", exec)
	}

	t.Run("DirectPoolStarts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, start(t, b.opts))
		require.Empty(t, poolerWarnings(b.logs), "a direct connection shows no pooler")
	})

	t.Run("PgBouncerCachedStatements", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Pool = bounced(t, false)
		requireRefused(t, start(t, b.opts))
	})

	t.Run("PgBouncerExec", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Pool = bounced(t, true)
		requireRefused(t, start(t, b.opts))
	})

	t.Run("PgBouncerServerConnectionsUsed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool := bounced(t, false)
		// An earlier client migrates through PgBouncer, leaving pgx's cached statements prepared on
		// its server connection, as an earlier worker does: the plugin's own migration then met
		// them (SQLSTATE 42P05, "already exists") at start.
		earlier := poolOf2(t, pool.Config().ConnString())
		_, err := store.Migrate(context.Background(), earlier, store.MigrateOptions{Schema: b.opts.Schema})
		require.NoError(t, err)
		earlier.Close()
		b.opts.Pool = pool
		requireRefused(t, start(t, b.opts))
	})

	// A pooler in session mode keeps a server connection per client, as a direct connection does:
	// the check sees a pooler (its PID is not a backend's) but no transaction mode, and lets it start.
	t.Run("PgBouncerSessionModeStarts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Pool = bouncedIn(t, "session", false)
		require.NoError(t, start(t, b.opts))
		require.Len(t, poolerWarnings(b.logs), 1, "the pooler is named in a warning")
	})

	t.Run("DeclaredPgBouncerStarts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Pool, b.opts.TransactionPooler = bounced(t, true), true
		require.NoError(t, start(t, b.opts))
	})
}

// poolerWarnings returns the warnings in logs that say Options.Pool goes through a pooler.
func poolerWarnings(logs *tallyState) []string {
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var found []string
	for _, w := range logs.warnings {
		if strings.Contains(w, "Options.Pool goes through a pooler") {
			found = append(found, w)
		}
	}
	return found
}
