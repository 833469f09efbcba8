package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/testenv"
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
		queued: []int{100, 1_000}, rateFor: 2 * time.Second, pgbenchFor: 1, claimBatch: 100,
		fleetReplicas: []int{2}, fleetLines: []int{2}, fleetTickets: 400, fleetPool: 2, fleetTenants: 50})
	require.NoError(t, err)

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
	for _, want := range []string{"Fleet:", "enqueue", "| 1000 |", "rate accuracy"} {
		require.True(t, strings.Contains(table, want), "the table has %q:\n%s", want, table)
	}
	requireFleet(t, res.Fleet)
}

// requireFleet checks the fleet figure of TestMeasureAll: 2 replicas on 2 lines and on tenant caps.
func requireFleet(t *testing.T, f *fleetResult) {
	t.Helper()
	// Each fleet run fails unless every ticket was completed exactly once (a second completion finds
	// the ticket finished and fails the run) and none is left queued, admitted or running.
	require.NotNil(t, f)
	if f.Skipped != "" {
		testenv.Skip(t, "fleet figure: "+f.Skipped)
	}
	require.Equal(t, "on", f.Settings["fsync"], "the fleet runs on a durable cluster")
	require.Equal(t, "on", f.Settings["synchronous_commit"])
	require.Equal(t, "on", f.Settings["full_page_writes"])
	require.Len(t, f.Rows, 2, "2 replicas by 2 lines, and by the tenant caps")
	for _, row := range f.Rows {
		require.Len(t, row.Sluice, 1, row.name())
		require.Len(t, row.River, 1, row.name())
		require.Len(t, row.River1, 1, "%s: River with one client beside River with two", row.name())
		s := row.SluiceMedian
		require.Positive(t, row.Ratio, row.name())
		require.Positive(t, row.RatioBest, row.name())
		require.Contains(t, []int{1, 2}, row.RiverBestClients, row.name())
		require.GreaterOrEqual(t, row.RiverBest.PerSecond, max(row.RiverMedian.PerSecond, row.River1Median.PerSecond), row.name())
		for _, r := range []fleetRun{s, row.RiverMedian, row.River1Median} {
			require.Positive(t, r.WALPerTicket, "%s: every drain writes WAL", row.name())
			require.Positive(t, r.WALEnqueuePerTicket, "%s: every fill writes WAL", row.name())
		}
		require.Zero(t, s.FailedClaims+s.FailedTakes, "%s: a claim or take failed: %q", row.name(), s.Errors)
		require.Positive(t, s.StatementsPerTicket, "the tracer counted the replicas' statements")
		require.Positive(t, row.RiverMedian.StatementsPerTicket, "the tracer counted the River clients' statements")
		require.Positive(t, s.ClaimsPerTicket, row.name())
		require.Positive(t, s.TakenShare, "%s: half the tickets are the other replica's, some taken", row.name())
		require.Positive(t, s.Connections, row.name())
		require.Positive(t, s.AdmitP99Ms, row.name())
	}
	table := f.markdown()
	for _, want := range []string{"| 2 | 2 |", "| 2 | 1 (`api`) + 50 tenant caps |"} {
		require.True(t, strings.Contains(table, want), "the fleet table has %q:\n%s", want, table)
	}
}

// TestMeasureConnections runs the connections figure's polling shape at a toy size: 16 replicas
// through a real PgBouncer in transaction mode drain 200 tickets over 1 and over 10 lines, every one
// completed exactly once (a second completion fails the run), none left, Verify clean; and River's
// two shapes beside it: 16 clients through the same kind of PgBouncer, PollOnly, drain 200 jobs.
// 16 clients' pools of 2 would open 32 connections directly: PgBouncer's 20 (and the setup pools')
// bound them, so the bound shows every shape went through it. It runs on a private cluster, so it
// needs no TEST_DATABASE_URL; without the pgbouncer or Postgres binaries it skips, or fails when CI
// is set.
func TestMeasureConnections(t *testing.T) {
	if !bouncerInstalled() {
		testenv.Skip(t, "no pgbouncer binary (Debian package pgbouncer)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an outer bound only
	defer cancel()
	res := &results{}
	err := measureConnections(ctx, nil, config{claimBatch: 100, fleetPool: 2, connReplicas: 16, connTickets: 200,
		connLines: []int{1, 10}, connShapes: []string{connPooledPolling, connRiverPooled, connRiverPooledDefaults}}, res)
	require.NoError(t, err)
	f := res.Connections
	require.NotNil(t, f)
	if f.Skipped != "" {
		testenv.Skip(t, "connections figure: "+f.Skipped)
	}
	require.Len(t, f.Runs, 4, "the polling shape at 1 and 10 lines, each River shape once")
	for _, r := range f.Runs {
		require.LessOrEqual(t, r.Connections, connBouncerPool+4, "%s: PgBouncer's server connections, the setup pools'", r.Name)
		require.Positive(t, r.Connections)
		require.Equal(t, r.Written, r.Completed, "%s: left %v, errors %q", r.Name, r.Left, r.Errors)
	}
	for _, r := range f.Runs[:2] {
		require.False(t, r.River)
		require.Empty(t, r.Left)
		require.Empty(t, r.Verify)
		require.Positive(t, r.AdmitP99Ms)
	}
	for i, name := range []string{connRiverPooled, connRiverPooledDefaults} {
		rv := f.Runs[2+i]
		require.True(t, rv.River)
		require.Equal(t, connShape{Name: name, Replicas: 16, Lines: 1}, rv.connShape)
		require.Equal(t, 200, rv.Completed, "counted from River's completed events")
	}
	md := f.markdown()
	require.Contains(t, md, "| PgBouncer, polling (200 ms) | 16 | 1 | 200 / 200 | none | clean |")
	require.Contains(t, md, "| PgBouncer, polling (200 ms) | 16 | 10 | 200 / 200 | none | clean |")
	require.Contains(t, md, "| River: PgBouncer, PollOnly, benchmark settings (fetch poll 20 ms) | 16 | - | 200 / 200 | - | - |")
	require.Contains(t, md, "| River: PgBouncer, PollOnly, defaults (fetch poll 1 s) | 16 | - | 200 / 200 | - | - |")
}
