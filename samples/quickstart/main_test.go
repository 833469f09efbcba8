package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"context"
	"flag"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/internal/testkit/pgbouncer"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// TestQuickstart runs the sample, so that it cannot rot.
func TestQuickstart(t *testing.T) {
	ctx := context.Background()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	res, err := run(ctx, testdb.URL(t), poolflags.Pooler{}, s.Addr, schema, 30, noop.NewTracerProvider())
	require.NoError(t, err)
	require.Equal(t, 8555, res.Sum) // 0² + 1² + ... + 29²
	require.LessOrEqual(t, res.Peak, 3)
	// 30 calls at 10/s with a burst of 3 take at least 2.7s of admissions.
	require.GreaterOrEqual(t, res.Elapsed.Seconds(), 2.7)
}

// TestQuickstart_TransactionPooler runs the sample through a PgBouncer in transaction mode, as
// -transaction-pooler (with and without -listen-url) sets it up, from a pooler URL left at pgx's
// default query mode: unflagged, the plugin would refuse to start with ErrTransactionPooler.
func TestQuickstart_TransactionPooler(t *testing.T) {
	ctx := context.Background()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	pool := testdb.Pool(t)
	b := pgbouncer.Start(t, testdb.URL(t), pgbouncer.Options{PoolSize: 4})
	pooled := strings.Replace(b.URL, "&default_query_exec_mode=exec", "", 1)
	require.NotEqual(t, b.URL, pooled)
	for _, tc := range []struct {
		name   string
		pooler poolflags.Pooler
	}{
		{"Polling", poolflags.Pooler{TransactionPooler: true}},
		{"ListenDirect", poolflags.Pooler{TransactionPooler: true, ListenURL: testdb.URL(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := run(ctx, pooled, tc.pooler, s.Addr, testdb.Schema(t, pool), 12, noop.NewTracerProvider())
			require.NoError(t, err)
			require.Equal(t, 506, res.Sum) // 0² + 1² + ... + 11²
			require.LessOrEqual(t, res.Peak, 3)
		})
	}
}

// TestPoolerFlags checks how -transaction-pooler and -listen-url take their environment variables.
func TestPoolerFlags(t *testing.T) {
	parse := func(t *testing.T, args ...string) (poolflags.Pooler, error) {
		t.Helper()
		fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
		get, err := poolflags.Define(fs)
		if err != nil {
			return poolflags.Pooler{}, err
		}
		require.NoError(t, fs.Parse(args))
		return get(), nil
	}
	t.Run("Unset", func(t *testing.T) {
		t.Setenv("SLUICE_TRANSACTION_POOLER", "")
		t.Setenv("SLUICE_LISTEN_URL", "")
		p, err := parse(t)
		require.NoError(t, err)
		require.Equal(t, poolflags.Pooler{}, p)
	})
	t.Run("FromEnvironment", func(t *testing.T) {
		t.Setenv("SLUICE_TRANSACTION_POOLER", "1")
		t.Setenv("SLUICE_LISTEN_URL", "postgres://db:5432/app")
		p, err := parse(t)
		require.NoError(t, err)
		require.Equal(t, poolflags.Pooler{TransactionPooler: true, ListenURL: "postgres://db:5432/app"}, p)
	})
	t.Run("FlagsWin", func(t *testing.T) {
		t.Setenv("SLUICE_TRANSACTION_POOLER", "true")
		t.Setenv("SLUICE_LISTEN_URL", "postgres://db:5432/app")
		p, err := parse(t, "-transaction-pooler=false", "-listen-url", "postgres://other:5432/app")
		require.NoError(t, err)
		require.Equal(t, poolflags.Pooler{ListenURL: "postgres://other:5432/app"}, p)
	})
	t.Run("BadEnvironmentRefused", func(t *testing.T) {
		t.Setenv("SLUICE_TRANSACTION_POOLER", "yes")
		_, err := parse(t)
		require.EqualError(t, err, `SLUICE_TRANSACTION_POOLER must be 1, true, 0 or false, got "yes"`)
	})
	t.Run("ExecModeBehindAPooler", func(t *testing.T) {
		cfg, err := poolflags.Pooler{TransactionPooler: true}.PoolConfig("postgres://db:6432/app")
		require.NoError(t, err)
		require.Equal(t, pgx.QueryExecModeExec, cfg.ConnConfig.DefaultQueryExecMode)
		cfg, err = poolflags.Pooler{}.PoolConfig("postgres://db:5432/app")
		require.NoError(t, err)
		require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.ConnConfig.DefaultQueryExecMode)
	})
}
