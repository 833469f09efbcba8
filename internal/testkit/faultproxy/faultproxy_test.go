package faultproxy_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/faultproxy"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup returns a pool through a proxy, a direct pool, and a table of their own.
func setup(t *testing.T, configure ...func(*pgxpool.Config)) (*faultproxy.Proxy, *pgxpool.Pool, *pgxpool.Pool, string) {
	t.Helper()
	direct := testdb.Pool(t)
	p, cfg := faultproxy.ForTest(t, testdb.PoolConfig(t))
	cfg.MaxConns = 1
	for _, c := range configure {
		c(cfg)
	}
	through := testdb.PoolWith(t, cfg)
	table := pgx.Identifier{testdb.Schema(t, direct), "proxied"}.Sanitize()
	_, err := direct.Exec(context.Background(), `CREATE TABLE `+table+` (v int)`)
	require.NoError(t, err)
	return p, through, direct, table
}

// testContext is a test's context, bounded generously.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func count(t *testing.T, db *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

func TestProxy(t *testing.T) {
	t.Parallel()

	t.Run("AfterRunCommitsAndLosesTheAnswer", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		p, through, direct, table := setup(t)
		f := p.Arm(faultproxy.AfterRun, func(r faultproxy.RoundTrip) bool { return r.Commits() && r.TxContains("INSERT") })
		err := pgx.BeginFunc(ctx, through, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, 1)
			return err
		})
		require.Error(t, err, "the caller heard the connection break")
		<-f.Fired()
		require.Equal(t, 1, count(t, direct, table), "yet the transaction committed")
		require.Equal(t, 1, count(t, through, table), "and the pool goes on with a new connection")
	})

	t.Run("BeforeSendRunsNothing", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		p, through, direct, table := setup(t)
		f := p.Arm(faultproxy.BeforeSend, func(r faultproxy.RoundTrip) bool { return r.Contains("INSERT") })
		_, err := through.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, 1)
		require.Error(t, err)
		<-f.Fired()
		require.Zero(t, count(t, direct, table))
	})

	t.Run("AfterStatementsCountsFromArming", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		// The pool pings every connection it hands out, as pgxpool does one idle for over a second
		// (a busy machine's case): the pings are not the caller's statements.
		p, through, direct, table := setup(t, func(cfg *pgxpool.Config) {
			cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return true }
		})
		f := p.Arm(faultproxy.BeforeSend, faultproxy.AfterStatements(3))
		for i := range 2 {
			_, err := through.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, i)
			require.NoError(t, err)
		}
		_, err := through.Exec(ctx, `INSERT INTO `+table+` VALUES ($1)`, 3)
		require.Error(t, err, "the third statement")
		<-f.Fired()
		require.Equal(t, 2, count(t, direct, table))
	})

	t.Run("ResetDropsEveryConnection", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		p, through, _, table := setup(t)
		conn, err := through.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		p.Reset()
		_, err = conn.Exec(ctx, `SELECT count(*) FROM `+table)
		require.Error(t, err)
	})

	t.Run("DelayHoldsAnswers", func(t *testing.T) {
		t.Parallel()
		p, through, _, table := setup(t)
		p.SetDelay(time.Millisecond)
		require.Zero(t, count(t, through, table))
		p.SetDelay(0)
	})
}

// The address rewrite keeps everything else of the URL.
func TestForURL(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Start("127.0.0.1:5432")
	require.NoError(t, err)
	defer p.Close()
	u, err := url.Parse(p.URL("postgres://u:pw@db.example:6543/test?sslmode=disable"))
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.Equal(t, "/test", u.Path)
	require.Equal(t, "disable", u.Query().Get("sslmode"))
}
