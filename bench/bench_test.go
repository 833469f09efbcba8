package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMeasureAll runs every figure at a toy size, so that `make test` keeps `make bench` working. It
// checks that each figure was taken and reported, never how fast anything was: performance is read
// from `make bench`, not asserted in tests.
func TestMeasureAll(t *testing.T) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		t.Skip("TEST_DATABASE_URL is not set; run it with make test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // an outer bound only
	defer cancel()
	res, err := measureAll(ctx, config{database: url, short: true, rounds: 1, tickets: 300,
		queued: []int{100, 1_000}, rateFor: 2 * time.Second, pgbenchFor: 1, claimBatch: 100})
	require.NoError(t, err)

	require.Len(t, res.Queue, 4)
	for _, p := range res.Queue {
		require.Len(t, p.Sluice, 1, p.Name)
		require.Len(t, p.River, 1, p.Name)
		require.Positive(t, p.Ratio, p.Name)
		require.Positive(t, p.Sluice[0].StatementsPerTicket, "the tracer counted Sluice's statements")
		require.Positive(t, p.River[0].StatementsPerTicket, "the tracer counted River's statements")
	}
	require.Len(t, res.Enqueue, 1)
	require.Positive(t, res.Enqueue[0].Ratio)
	require.Len(t, res.ClaimLatency, 2)
	require.Len(t, res.Rate, 4)
	for _, r := range res.Rate {
		require.Positive(t, r.Admitted, "%s burner=%v", r.Dimension, r.Burner)
		require.True(t, r.Conforms, "%s burner=%v: excess %v over burst %v", r.Dimension, r.Burner, r.Excess, r.Burst)
	}
	require.NotNil(t, res.Pgbench)
	table := res.markdown()
	for _, want := range []string{"claim + complete, 8 claimer(s), 100 key(s)", "enqueue", "| 1000 |", "rate accuracy"} {
		require.True(t, strings.Contains(table, want), "the table has %q:\n%s", want, table)
	}
}
