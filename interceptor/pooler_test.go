package interceptor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/pgbouncer"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
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
