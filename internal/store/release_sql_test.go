package store_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// randomReservation is a ticket's cost and its output part: none, small or up to MaxCost, the output
// none, all or some of it.
func randomReservation(r *rand.Rand) (cost, output int64) {
	switch r.IntN(3) {
	case 0:
	case 1:
		cost = r.Int64N(5000)
	default:
		cost = r.Int64N(store.MaxCost + 1)
	}
	switch r.IntN(3) {
	case 0:
	case 1:
		output = cost
	default:
		output = r.Int64N(cost + 1)
	}
	return cost, output
}

// randomUsage is what a run reports against a reservation of cost: nothing (-1, or any negative),
// none, under, exactly or over it; and an output part that may be negative or above the total (the
// engine clamps it).
func randomUsage(r *rand.Rand, cost int64) (actual, output int64) {
	switch r.IntN(6) {
	case 0:
		actual = -1
	case 1:
		actual = -2 - r.Int64N(1000)
	case 2:
	case 3:
		actual = r.Int64N(cost + 1)
	case 4:
		actual = cost
	default:
		actual = cost + r.Int64N(store.MaxCost)
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		output = -r.Int64N(100)
	case 2:
		output = r.Int64N(max(actual, 0) + 1)
	default:
		output = max(actual, 0) + r.Int64N(1000)
	}
	return actual, output
}

// TestQueue_CompleteManyLedgerMatchesThrottle: the refund rule is computed in SQL for a whole batch
// of completions (releaseAppendSQL); on random tickets, each drawing on one to three limits, with
// random reservations and reported usage (tokens above MaxCost count as MaxCost), every ledger row a batch appends is what
// admit.ReportedUsage and throttle.ReleasedCost give, summed per key with Released.Add. Tickets
// completed already, or unknown, release nothing.
func TestQueue_CompleteManyLedgerMatchesThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, tickets, batches = 26, 600, 6
	t.Logf("seed %d: %d tickets completed in %d batches", seed, tickets, batches)
	r := rand.New(rand.NewPCG(seed, seed))
	keys := []string{"a", "b", "c"}
	q, _ := setup(t, throttle.Limit{Key: "a", MaxConcurrent: tickets}, throttle.Limit{Key: "b", MaxConcurrent: tickets},
		throttle.Limit{Key: "c", MaxConcurrent: tickets})
	schema := pgx.Identifier{q.Schema()}.Sanitize()

	ps := make([]store.EnqueueParams, tickets)
	for i := range ps {
		ks := slices.Clone(keys)
		r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		cost, output := randomReservation(r)
		ps[i] = store.EnqueueParams{LimitKeys: ks[:1+r.IntN(len(ks))], Cost: cost, OutputCost: output,
			Owner: []string{"o1", "o2"}[r.IntN(2)]}
	}
	ts, err := q.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	for admitted := 0; admitted < tickets; {
		res := claim(t, q, store.ClaimParams{Owner: "o1", Max: tickets}) // o1's run at once, o2's wait admitted
		require.NotEmpty(t, res.Admitted, "every ticket fits: %d of %d admitted", admitted, tickets)
		admitted += len(res.Admitted)
	}

	r.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	var completed []int64
	var lastRow int64
	for b := range batches {
		batch := ts[b*tickets/batches : (b+1)*tickets/batches]
		var cps []store.CompleteParams
		var wantFound []bool
		want := map[string]throttle.Released{}
		for _, tk := range batch {
			actual, output := randomUsage(r, tk.Cost)
			cps = append(cps, store.CompleteParams{TicketID: tk.ID, ActualCost: actual, ActualOutput: output,
				OutcomeKind: store.OutcomeCompleted})
			wantFound = append(wantFound, true)
			// The engine bounds reported tokens at MaxCost where they enter (boundUsage).
			used, reported := admit.ReportedUsage(min(actual, store.MaxCost), output)
			for _, k := range tk.LimitKeys {
				want[k] = want[k].Add(throttle.ReleasedCost(tk.Reserved(), used, reported))
			}
		}
		// Tickets completed by an earlier batch, and one that never existed, are not found.
		for range min(len(completed), 3) {
			id := completed[r.IntN(len(completed))]
			if !slices.ContainsFunc(cps, func(c store.CompleteParams) bool { return c.TicketID == id }) {
				cps = append(cps, store.CompleteParams{TicketID: id, ActualCost: 1, OutcomeKind: store.OutcomeCompleted})
				wantFound = append(wantFound, false)
			}
		}
		cps = append(cps, store.CompleteParams{TicketID: 1 << 50, ActualCost: 7, OutcomeKind: store.OutcomeCompleted})
		wantFound = append(wantFound, false)
		perm := r.Perm(len(cps))
		shuffled, shuffledFound := make([]store.CompleteParams, len(cps)), make([]bool, len(cps))
		for i, j := range perm {
			shuffled[i], shuffledFound[i] = cps[j], wantFound[j]
		}

		found, err := q.CompleteMany(ctx, shuffled)
		require.NoError(t, err)
		require.Equal(t, shuffledFound, found, "batch %d", b)
		for _, tk := range batch {
			completed = append(completed, tk.ID)
		}

		rows, err := q.Pool().Query(ctx, `SELECT id, key, count, reserved, refund, refund_output FROM `+schema+
			`.sluice_release WHERE id > $1 ORDER BY id`, lastRow)
		require.NoError(t, err)
		got := map[string]throttle.Released{}
		for rows.Next() {
			var key string
			var rel throttle.Released
			require.NoError(t, rows.Scan(&lastRow, &key, &rel.Count, &rel.Reserved, &rel.Refund, &rel.RefundOutput))
			require.NotContains(t, got, key, "batch %d appends one row per key", b)
			got[key] = rel
		}
		require.NoError(t, rows.Err())
		require.Equal(t, want, got, "batch %d (seed %d): the ledger is throttle's releases summed per key", b, seed)
	}
	requireHealthy(t, q)
}
