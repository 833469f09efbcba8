package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)

	t.Run("TwiceIsANoOp", func(t *testing.T) {
		t.Parallel()
		schema := testdb.Schema(t, pool)
		res, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: schema})
		require.NoError(t, err)
		require.Empty(t, res.Applied)
		require.Equal(t, 14, res.Version)
	})

	t.Run("ConcurrentRunsApplyOnce", func(t *testing.T) {
		t.Parallel()
		schema := testdb.NewSchemaName()
		t.Cleanup(func() { _, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
		errs := make(chan error, 4)
		applied := make(chan int, 4)
		for range 4 {
			go func() {
				res, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: schema})
				applied <- len(res.Applied)
				errs <- err
			}()
		}
		total := 0
		for range 4 {
			require.NoError(t, <-errs)
			total += <-applied
		}
		require.Equal(t, 14, total, "each migration applied once")
	})

	t.Run("RejectsHostileSchema", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{`x"; DROP TABLE users; --`, "Upper", "1abc", "a-b", strings.Repeat("a", 64), "a b"} {
			_, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: s})
			require.ErrorContains(t, err, "Schema must match", "schema %q", s)
			_, err = store.New(pool, store.Options{Schema: s})
			require.ErrorContains(t, err, "Schema must match", "schema %q", s)
		}
	})

	t.Run("DownThenUp", func(t *testing.T) {
		t.Parallel()
		schema := testdb.Schema(t, pool)
		require.NoError(t, store.MigrateDown(ctx, pool, store.MigrateOptions{Schema: schema}, 0))
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'sluice_migration'`, schema).Scan(&n))
		require.Zero(t, n)
		res, err := store.Migrate(ctx, pool, store.MigrateOptions{Schema: schema})
		require.NoError(t, err)
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, res.Applied)
	})
}
