package store_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// inflightFigures are a limit row's in-flight figures.
type inflightFigures struct {
	count  int
	tokens int64
}

// satAddInt64 is a + b saturated at the bounds of int64, as the SQL's sums of the ledger are.
func satAddInt64(a, b int64) int64 {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return math.MaxInt64
	}
	return math.MinInt64
}

// TestPendingNettingMatchesThrottle: the readers that do not lock a limit row net its pending
// releases out of its in-flight figures, in SQL (netPending: Status and StatusPage through
// limitReadColumns, Overview through its own sums) or in Go (LimitStatus folds them with
// Limit.ReleaseMany); the next claim folds them with ReleaseMany. On rows of random and edge
// figures (none, one, MaxCost, the largest int64) and ledgers of none to three rows, summing to
// nothing, less than the row holds, exactly it, one more, or past int64, every reader's figures are
// ReleaseMany's: the sum saturates and the figure stays at 0 or above.
func TestPendingNettingMatchesThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, keys = 26, 300
	t.Logf("seed %d: %d keys", seed, keys)
	r := rand.New(rand.NewPCG(seed, seed))
	var limits []throttle.Limit
	for i := range keys {
		limits = append(limits, throttle.Limit{Key: fmt.Sprintf("k%03d", i), MaxConcurrent: 1 << 20})
	}
	q, b := setup(t, limits...)
	schema := pgx.Identifier{q.Schema()}.Sanitize()

	pick := func(vs ...int64) int64 { return vs[r.IntN(len(vs))] }
	var rowKeys, ledgerKeys []string
	var rowCounts, ledgerCounts []int32
	var rowTokens, ledgerReserved []int64
	want := map[string]inflightFigures{}
	for _, l := range limits {
		row := inflightFigures{count: int(pick(0, 1, 7, 10_000, r.Int64N(20_000))),
			tokens: pick(0, 1, store.MaxCost, math.MaxInt64, r.Int64N(store.MaxCost))}
		var ledger []inflightFigures
		switch r.IntN(6) {
		case 0: // nothing pending
		case 1: // exactly what the row holds
			ledger = append(ledger, row)
		case 2: // one more than the row holds
			ledger = append(ledger, inflightFigures{min(row.count, 10_000), row.tokens}, inflightFigures{1, 1})
		case 3: // past int64 in sum
			ledger = append(ledger, inflightFigures{1, math.MaxInt64}, inflightFigures{2, 1 << 62})
		default:
			for range 1 + r.IntN(3) {
				ledger = append(ledger, inflightFigures{int(pick(0, 1, 10_000, r.Int64N(10_001))),
					pick(0, 1, store.MaxCost, 1<<62, r.Int64N(store.MaxCost))})
			}
		}
		var pending throttle.Released
		for _, p := range ledger {
			pending.Count += p.count
			pending.Reserved = satAddInt64(pending.Reserved, p.tokens)
			ledgerKeys, ledgerCounts, ledgerReserved = append(ledgerKeys, l.Key), append(ledgerCounts, int32(p.count)),
				append(ledgerReserved, p.tokens)
		}
		rowKeys, rowCounts, rowTokens = append(rowKeys, l.Key), append(rowCounts, int32(row.count)), append(rowTokens, row.tokens)
		s := l.ReleaseMany(throttle.State{InflightCount: row.count, InflightTokens: row.tokens}, b.clock.Now(), pending)
		want[l.Key] = inflightFigures{s.InflightCount, s.InflightTokens}
	}
	_, err := q.Pool().Exec(ctx, `UPDATE `+schema+`.sluice_limit l SET inflight_count = u.count, inflight_tokens = u.tokens
		FROM unnest($1::text[], $2::int[], $3::bigint[]) AS u(key, count, tokens) WHERE l.key = u.key`, rowKeys, rowCounts, rowTokens)
	require.NoError(t, err)
	_, err = q.Pool().Exec(ctx, `INSERT INTO `+schema+`.sluice_release (key, count, reserved, refund, refund_output)
		SELECT key, count, reserved, 0, 0 FROM unnest($1::text[], $2::int[], $3::bigint[]) AS u(key, count, reserved)`,
		ledgerKeys, ledgerCounts, ledgerReserved)
	require.NoError(t, err)

	check := func(reader, key string, count, tokens int64) {
		t.Helper()
		require.Equal(t, want[key], inflightFigures{int(count), tokens}, "%s of %s (seed %d)", reader, key, seed)
	}
	statuses, err := q.Status(ctx)
	require.NoError(t, err)
	require.Len(t, statuses, keys)
	for _, s := range statuses {
		check("Status", s.Configured.Key, int64(s.State.InflightCount), s.State.InflightTokens)
	}
	page, err := q.StatusPage(ctx, store.StatusParams{Prefix: "k", Limit: keys})
	require.NoError(t, err)
	require.Len(t, page.Keys, keys)
	for _, s := range page.Keys {
		check("StatusPage", s.Configured.Key, int64(s.State.InflightCount), s.State.InflightTokens)
	}
	o, err := q.Overview(ctx, store.OverviewParams{Limit: store.MaxOverviewLimit})
	require.NoError(t, err)
	require.Len(t, o.Rows, keys)
	for _, row := range o.Rows {
		check("Overview", row.Key, row.InflightCount, row.InflightTokens)
	}
	for _, l := range limits {
		ls, err := q.LimitStatus(ctx, l.Key)
		require.NoError(t, err)
		check("LimitStatus", l.Key, int64(ls.State.InflightCount), ls.State.InflightTokens)
	}
}
