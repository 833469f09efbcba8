package release_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// upgradeRuns is what the workers' record of their runs says.
type upgradeRuns struct {
	activities, runs int
	missing          []string // workflows with fewer activities done than they ran
	sameAttempt      []string // act#attempt run more than once
	afterKill        []string // activities run more than once, one of the runs cut short by the kill
	afterTimeout     []string // activities run more than once otherwise: an attempt Temporal timed out
	effectsTwice     int      // activities whose side effect was recorded more than once
}

// readRuns reads upgrade_run once every worker has exited. started workflows ran perFlow activities
// each; cut are the activities the kill cut short.
func readRuns(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, started, perFlow int, cut []string) upgradeRuns {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT act, proc, attempt, done FROM `+pgx.Identifier{schema, "upgrade_run"}.Sanitize()+` ORDER BY id`)
	require.NoError(t, err)
	type run struct { // exported fields, for pgx.RowToStructByPos
		Act, Proc string
		Attempt   int
		Done      bool
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[run])
	require.NoError(t, err)
	var r upgradeRuns
	byAct := map[string][]run{}
	attempts := map[string]int{}
	for _, x := range all {
		byAct[x.Act] = append(byAct[x.Act], x)
		attempts[fmt.Sprintf("%s#%d", x.Act, x.Attempt)]++
	}
	r.runs, r.activities = len(all), len(byAct)
	for k, n := range attempts {
		if n > 1 {
			r.sameAttempt = append(r.sameAttempt, fmt.Sprintf("%s x%d", k, n))
		}
	}
	doneByFlow := map[string]int{}
	for act, runs := range byAct {
		flow, _, _ := strings.Cut(act, "/")
		effects := 0
		var trail []string
		for _, x := range runs {
			if x.Done {
				effects++
			}
			trail = append(trail, fmt.Sprintf("%s#%d", x.Proc, x.Attempt))
		}
		if effects > 0 {
			doneByFlow[flow]++
		}
		if effects > 1 {
			r.effectsTwice++
		}
		if len(runs) > 1 {
			label := fmt.Sprintf("%s%v", act[strings.LastIndexByte(act, '-')+1:], trail)
			if slices.Contains(cut, act) {
				r.afterKill = append(r.afterKill, label)
			} else {
				r.afterTimeout = append(r.afterTimeout, label)
			}
		}
	}
	require.Len(t, doneByFlow, started, "every workflow's activities recorded runs")
	for flow, n := range doneByFlow {
		if n != perFlow {
			r.missing = append(r.missing, fmt.Sprintf("%s: %d of %d activities done", flow, n, perFlow))
		}
	}
	slices.Sort(r.sameAttempt)
	slices.Sort(r.afterKill)
	slices.Sort(r.afterTimeout)
	return r
}

// maxOverlap returns the largest number of runs in progress at once. A finish at the instant of
// another's start does not overlap it.
func maxOverlap(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	table := pgx.Identifier{schema, "upgrade_run"}.Sanitize()
	var n int
	require.NoError(t, pool.QueryRow(ctx, `WITH ev AS (
			SELECT started_at AS at, 1 AS d FROM `+table+`
			UNION ALL SELECT finished_at, -1 FROM `+table+` WHERE finished_at IS NOT NULL)
		SELECT coalesce(max(c), 0) FROM (SELECT sum(d) OVER (ORDER BY at, d ROWS UNBOUNDED PRECEDING) AS c FROM ev) x`).Scan(&n))
	return n
}

// rateUsage is what sluice_usage says of a key's admissions.
type rateUsage struct {
	requests int64 // admitted in all
	peak     int64 // the most admitted in one second
	seconds  int   // seconds with admissions
}

// requireRateHeld fails when key's admissions drew more requests over a span of seconds than its
// rate allows. sluice_usage records them by the second of the database's clock at each admission,
// as the releases tested all do, the release's and the working tree's workers alike: the admissions
// of seconds i..j lie within j-i+1 seconds, so they are at most burst + rps × (j-i+1), whichever
// worker admitted them (gate's TestGate_TypeScriptRatesHoldWithGo checks the same). The runs' start
// times cannot show this: a run starts some time after its admission, so runs admitted apart may
// start together.
func requireRateHeld(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, key string, rps, burst int64) rateUsage {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM second)::bigint, requests FROM `+
		pgx.Identifier{schema, "sluice_usage"}.Sanitize()+` WHERE key = $1 AND requests > 0 ORDER BY second`, key)
	require.NoError(t, err)
	secs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ At, Requests int64 }])
	require.NoError(t, err)
	u := rateUsage{seconds: len(secs)}
	for i := range secs {
		u.requests += secs[i].Requests
		u.peak = max(u.peak, secs[i].Requests)
		var n int64
		for j := i; j < len(secs); j++ {
			n += secs[j].Requests
			span := secs[j].At - secs[i].At + 1
			require.LessOrEqual(t, n, burst+rps*span, "key %q: requests admitted in seconds %d..%d (burst %d + %d/s × %ds): %v",
				key, secs[i].At, secs[j].At, burst, rps, span, secs)
		}
	}
	return u
}

// maxAdmissionGap returns the longest time between two consecutive run starts that overlaps
// [from, to]: admissions stalled at least that long (the rate allows one every 50ms).
func maxAdmissionGap(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, from, to time.Time) time.Duration {
	t.Helper()
	var us float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM gap) * 1e6), 0) FROM (
			SELECT started_at - lag(started_at) OVER (ORDER BY started_at) AS gap, started_at FROM `+
		pgx.Identifier{schema, "upgrade_run"}.Sanitize()+`) x
		WHERE started_at >= $1 AND started_at - gap <= $2`, from, to).Scan(&us))
	return time.Duration(us) * time.Microsecond
}

// dumpUpgrade logs the tickets and the runs of a failed upgrade.
func dumpUpgrade(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT id, state, owner, workflow_id, activity_id, attempt, coalesce(outcome_kind, '') FROM `+
		pgx.Identifier{schema, "sluice_ticket"}.Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Logf("read tickets: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var state, owner, wf, act, kind string
		var attempt int
		if rows.Scan(&id, &state, &owner, &wf, &act, &attempt, &kind) == nil {
			t.Logf("ticket %d: %s owner %s %s/%s attempt %d outcome %q", id, state, owner, wf, act, attempt, kind)
		}
	}
}
