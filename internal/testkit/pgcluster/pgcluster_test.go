package pgcluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/pgcluster"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// settings reads the durability settings of the cluster at url.
func settings(t *testing.T, url string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	got := map[string]string{}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		var v string
		require.NoError(t, conn.QueryRow(ctx, "SHOW "+name).Scan(&v))
		got[name] = v
	}
	return got
}

// The tests' clusters trade durability for speed; a Durable one keeps PostgreSQL's defaults, which
// the benchmark measures on.
func TestDurability(t *testing.T) {
	c := pgcluster.Start(t)
	require.Equal(t, map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}, settings(t, c.URL))

	d, err := pgcluster.New(pgcluster.Options{Durable: true})
	if errors.Is(err, pgcluster.ErrUnavailable) {
		testenv.Skip(t, err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.Equal(t, map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}, settings(t, d.URL))
}
