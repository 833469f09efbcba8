package release_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/pgqueue"
)

// The worker's limits (testdata/upgradeworker): the cap of "svc" the runs are checked against, and
// the rate of "api" its admissions are.
const (
	upgradeCap                      = 3
	upgradeRate, upgradeBurst int64 = 20, 4
)

// upgradeRunTable is where the workers record each run of Work; done is its side effect.
const upgradeRunTable = `CREATE TABLE %s.upgrade_run (id bigserial PRIMARY KEY, act text NOT NULL, proc text NOT NULL,
	attempt int NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz,
	done boolean NOT NULL DEFAULT false)`

// TestRollingUpgrade upgrades a fleet from the last release to the working tree while workflows
// run: three workers built from the newest v* tag migrate a fresh schema and work a stream of
// workflows whose activities draw on a cap and a rate; two workers built from the working tree start
// beside them (applying the migrations the release lacks, if any, while the old ones run); then the
// old ones leave, one by SIGTERM, one by SIGKILL, one by SIGTERM. Every workflow completes with the
// right result; no admission ran twice and the activities that ran more than once are those the
// kill cut short (bounded by the cap) or whose attempt Temporal timed out; the runs never overlapped
// beyond the cap, and the admissions never drew more than the rate's burst + rate × span over any
// span of seconds; Verify is clean. It logs the migrations each phase applied, how long they held
// back a probe that takes the table locks a claim takes, and an UPGRADE: summary line.
//
// SLUICE_UPGRADE=full runs more workflows in each phase; SLUICE_UPGRADE_FROM names another ref.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	ref, commit := previousRelease(t, root)
	url := testdb.URL(t)
	if os.Getenv("SLUICE_TEMPORAL_CLI") == "" {
		testenv.Skip(t, "SLUICE_TEMPORAL_CLI is not set")
	}
	perPhase, perFlow, inflight := 3, 6, 3
	if os.Getenv("SLUICE_UPGRADE") == "full" {
		perPhase, perFlow, inflight = 15, 10, 4
	}

	// The two workers: the release's, from its tree; the working tree's.
	oldBin := buildWorker(t, extractTree(t, root, commit), "old")
	newBin := buildWorker(t, root, "new")

	testdb.Heavy(t) // five worker processes with their pools
	s, err := temporaltest.Start(context.Background())
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// A fresh schema that only the old workers migrate.
	pool := testdb.Pool(t)
	schema := testdb.NewSchemaName()
	qs := pgx.Identifier{schema}.Sanitize()
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+qs)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+qs+` CASCADE`); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	_, err = pool.Exec(ctx, fmt.Sprintf(upgradeRunTable, qs))
	require.NoError(t, err)
	queue := "upgrade-" + schema
	env := []string{"UPGRADE_DATABASE_URL=" + url, "UPGRADE_TEMPORAL=" + s.Addr, "UPGRADE_SCHEMA=" + schema, "UPGRADE_QUEUE=" + queue}

	// Phase 1: the release's fleet.
	var olds []*proc
	for i := range 3 {
		p := startProc(t, oldBin, fmt.Sprintf("O%d", i+1), ref, env...)
		p.waitReady(t)
		olds = append(olds, p)
	}
	phase1 := migrationsApplied(t, ctx, pool, schema)
	t.Logf("phase 1: schema %s migrated by %s: versions %v", schema, ref, phase1)
	st := newStream(c, queue, perFlow, inflight)
	go st.run(ctx, "wf-"+schema)
	defer func() {
		if t.Failed() {
			cancel() // the workflows' waits end with it
		}
		st.stop()
	}()
	defer func() {
		if t.Failed() {
			dumpUpgrade(t, pool, schema)
		}
	}()
	st.waitCompleted(t, ctx, perPhase, "phase 1 (old workers only)")

	// Phase 2: new workers start beside the old ones; the first applies what the release lacks.
	pr := &probe{first: make(chan struct{})}
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan error, 1)
	go func() { probeDone <- runProbe(probeCtx, url, schema, pr) }()
	select { // the probe runs before the new workers start
	case <-pr.first:
	case err := <-probeDone:
		t.Fatalf("the probe ended before its first statement: %v", err)
	}
	n1 := startProc(t, newBin, "N1", "working tree", env...)
	n1.waitReady(t)
	n2 := startProc(t, newBin, "N2", "working tree", env...)
	n2.waitReady(t)
	news := []*proc{n1, n2}
	all := migrationsApplied(t, ctx, pool, schema)
	phase2 := slices.DeleteFunc(slices.Clone(all), func(v int) bool { return slices.Contains(phase1, v) })
	migFrom, migTo := n1.started, n1.migratedAt
	stall, probes := pr.max(migFrom, migTo)
	applied := versions(phase2)
	if len(phase2) == 0 {
		applied += " (" + ref + " has every migration of the working tree)"
	}
	t.Logf("phase 2: the working tree's workers applied %s while the old workers ran; N1 started to its Migrate returned: %s; "+
		"longest probe then %s (%d probes)", applied, migTo.Sub(migFrom).Round(time.Millisecond), stall.Round(time.Microsecond), probes)
	_, done := st.counts()
	st.waitCompleted(t, ctx, done+perPhase, "phase 2 (mixed fleet)")
	waitRows(t, ctx, pool, `SELECT count(DISTINCT proc) = 2 FROM `+qs+`.upgrade_run WHERE proc IN ('N1', 'N2')`, "both new workers ran activities")

	// Phase 3: the old workers leave: SIGTERM, SIGKILL while it runs an activity, SIGTERM.
	olds[0].stop(t)
	_, done = st.counts()
	st.waitCompleted(t, ctx, done+perPhase, "after the SIGTERM of O1")
	waitRows(t, ctx, pool, `SELECT EXISTS (SELECT 1 FROM `+qs+`.upgrade_run WHERE proc = 'O2' AND finished_at IS NULL)`, "O2 runs an activity")
	killedAt := olds[1].kill(t)
	// Its runs in progress ended at the kill at the latest: close them, and note what the kill cut.
	rows, err := pool.Query(ctx, `UPDATE `+qs+`.upgrade_run SET finished_at = greatest(started_at, clock_timestamp())
		WHERE proc = 'O2' AND finished_at IS NULL RETURNING act`)
	require.NoError(t, err)
	cut, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	t.Logf("SIGKILL of O2 cut %d runs short: %v", len(cut), cut)
	_, done = st.counts()
	st.waitCompleted(t, ctx, done+perPhase, "after the SIGKILL of O2")
	olds[2].stop(t)
	_, done = st.counts()
	st.waitCompleted(t, ctx, done+perPhase, "new workers only")

	// The end: no more workflows; every one started completes.
	st.stop()
	stopProbe()
	require.NoError(t, <-probeDone)
	for _, p := range news {
		p.stop(t)
	}
	started, completed := st.counts()
	require.Empty(t, st.failures, "every workflow completes with the right result")
	require.Equal(t, started, completed)

	// Every process has exited: the runs are all recorded.
	r := readRuns(t, ctx, pool, schema, started, perFlow, cut)
	require.Empty(t, r.missing, "activities without a run that did their work")
	require.Empty(t, r.sameAttempt, "admissions that ran twice (an activity's attempt run more than once)")
	require.LessOrEqual(t, len(r.afterKill), upgradeCap, "activities run again after the kill: at most what the killed worker ran")
	overlap := maxOverlap(t, ctx, pool, schema)
	require.LessOrEqual(t, overlap, upgradeCap, "runs in progress at once, as the activities recorded them")
	rate := requireRateHeld(t, ctx, pool, schema, "api", upgradeRate, upgradeBurst)
	require.GreaterOrEqual(t, rate.requests, int64(r.runs), "every run was admitted: the usage of \"api\" counts a request for each")
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	require.NoError(t, err)
	problems, err := q.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems, "Verify")
	var unfinished int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+qs+`.sluice_ticket WHERE state IN ('queued', 'admitted', 'running')`).Scan(&unfinished))
	require.Zero(t, unfinished, "tickets left queued, admitted or running")

	stallAll, _ := pr.max(time.Time{}, time.Time{})
	gap := maxAdmissionGap(t, ctx, pool, schema, migFrom, migTo)
	t.Logf("UPGRADE: from %s (%.12s) to the working tree; migrations: %s applied %s, the working tree %s; "+
		"workflows %d/%d; activities %d, runs %d; ran more than once: %d (%d after the SIGKILL, %d after a Temporal timeout: %v); "+
		"side effects twice: %d; max concurrency %d (cap %d); requests admitted on api %d, in %d seconds, at most %d in one "+
		"(rate %d/s, burst %d: no span of seconds over burst + rate × span); migration window %s: longest claim-lock probe %s, longest gap between run starts %s; "+
		"longest probe overall %s; Verify clean; SIGKILL at %s",
		ref, commit, ref, versions(phase1), versions(phase2), completed, started, r.activities, r.runs,
		len(r.afterKill)+len(r.afterTimeout), len(r.afterKill), len(r.afterTimeout), r.afterTimeout, r.effectsTwice,
		overlap, upgradeCap, rate.requests, rate.seconds, rate.peak, upgradeRate, upgradeBurst, migTo.Sub(migFrom).Round(time.Millisecond), stall.Round(time.Microsecond), gap.Round(time.Millisecond),
		stallAll.Round(time.Microsecond), killedAt.Format("15:04:05.000"))
}

// versions prints a list of migration versions, "none" when empty.
func versions(vs []int) string {
	if len(vs) == 0 {
		return "none"
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%03d", v)
	}
	return strings.Join(s, ",")
}

// migrationsApplied reads the versions recorded in the schema's sluice_migration.
func migrationsApplied(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) []int {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT version FROM `+pgx.Identifier{schema, "sluice_migration"}.Sanitize()+` ORDER BY version`)
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return vs
}

// waitRows waits until the query returns true. The workers' rows have no notification of their own:
// it reads them again every 20ms, a pace, not a margin.
func waitRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, query, what string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, query).Scan(&ok))
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// runProbe runs the probe's statement every 20ms on a connection of its own until ctx ends.
func runProbe(ctx context.Context, url, schema string, p *probe) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qs := pgx.Identifier{schema}.Sanitize()
	// No row matches: these take the tables' ROW EXCLUSIVE locks, as a claim's writes do, and no row
	// lock, so that the probe waits for a migration's table locks and for nothing the claims hold.
	stmt := `UPDATE ` + qs + `.sluice_limit SET key = key WHERE false; UPDATE ` + qs + `.sluice_ticket SET state = state WHERE false`
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		at := time.Now()
		if _, err := conn.Exec(ctx, stmt); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("probe: %w", err)
		}
		p.mu.Lock()
		p.samples = append(p.samples, probeSample{at: at, dur: time.Since(at)})
		if len(p.samples) == 1 {
			close(p.first)
		}
		p.mu.Unlock()
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil
		}
	}
}
