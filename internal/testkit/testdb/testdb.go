// Package testdb gives tests a real Postgres: a pool on TEST_DATABASE_URL and throwaway migrated
// schemas, so that runs never collide. Without a URL, tests skip locally and fail under CI (CI set).
package testdb

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// URL returns the test database URL: TEST_DATABASE_URL, else DATABASE_URL. It skips the test when
// neither is set (counted in the package's summary, see testenv), unless CI is set, where it fails:
// CI must never pass by skipping.
func URL(t testing.TB) string {
	t.Helper()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"))
	if url == "" {
		testenv.Skip(t, "TEST_DATABASE_URL is not set")
	}
	return url
}

// PoolConfig returns a pool configuration for the test database with an empty search_path, so that
// any statement that forgets to qualify a table with its schema fails.
func PoolConfig(t testing.TB) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-test"
	return cfg
}

// Pool returns a new pool on the test database, closed at the end of the test.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolWith(t, PoolConfig(t))
}

// PoolWith returns a new pool from cfg, closed at the end of the test.
func PoolWith(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, pool.Ping(ctx))
	t.Cleanup(pool.Close)
	return pool
}

// heavyLock is the advisory lock Heavy holds on the test database.
const heavyLock = 0x5_1C_E0_F1EE7

// Heavy waits until no other heavy test runs on the test database, in this or any other package's
// test binary, and holds that until t ends. A heavy test opens a fleet of pools, 20 connections or
// more: two of them beside the rest of a parallel suite would pass the server's max_connections
// (100 by default), and a test would fail to connect ("too many clients already"). Call it before
// the test's own deadline starts: the wait is not the test's. The wait's outer bound is 30 minutes.
func Heavy(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, URL(t))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(heavyLock))
	require.NoError(t, err, "testdb: wait for the other heavy tests")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(heavyLock))
		_ = conn.Close(ctx) // closing releases the lock too
	})
}

// NewSchemaName returns a fresh schema name.
func NewSchemaName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "sluice_test_" + hex.EncodeToString(b)
}

var migrateMu sync.Mutex

// Schema creates a fresh migrated schema on pool's database and drops it at the end of the test. It
// returns the schema's name.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	schema := NewSchemaName()
	ctx := context.Background()
	migrateMu.Lock() // DDL from many parallel tests at once only adds catalog lock waits
	_, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: schema})
	migrateMu.Unlock()
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		if err != nil {
			t.Logf("testdb: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Engine returns a store.Queue over a fresh migrated schema on a new pool.
func Engine(t testing.TB, opts store.Options) *store.Queue {
	t.Helper()
	pool := Pool(t)
	opts.Schema = Schema(t, pool)
	q, err := store.New(pool, opts)
	require.NoError(t, err)
	return q
}
