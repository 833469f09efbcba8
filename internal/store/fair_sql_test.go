package store_test

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// fairState is what fair-share tagging reads: each line's virtual time, and the finish tag of each
// fairness key of a line.
type fairState struct {
	vtime  map[string]float64
	finish map[[2]string]float64 // by line and fairness key
}

func readFairState(t *testing.T, q *store.Queue) fairState {
	t.Helper()
	ctx := context.Background()
	schema := pgx.Identifier{q.Schema()}.Sanitize()
	st := fairState{vtime: map[string]float64{}, finish: map[[2]string]float64{}}
	rows, err := q.Pool().Query(ctx, `SELECT key, vtime FROM `+schema+`.sluice_limit`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var v float64
		require.NoError(t, rows.Scan(&k, &v))
		st.vtime[k] = v
	}
	require.NoError(t, rows.Err())
	rows, err = q.Pool().Query(ctx, `SELECT line_key, fairness_key, finish FROM `+schema+`.sluice_fair`)
	require.NoError(t, err)
	for rows.Next() {
		var line, fk string
		var f float64
		require.NoError(t, rows.Scan(&line, &fk, &f))
		st.finish[[2]string{line, fk}] = f
	}
	require.NoError(t, rows.Err())
	return st
}

// randomFairBatch returns n tickets on lines a and b (some drawing on c too, a few on a limit that
// does not exist), with and without fairness keys, of varied cost, weight (0: the default) and
// priority.
func randomFairBatch(r *rand.Rand, n int) []store.EnqueueParams {
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		line := []string{"a", "b"}[r.IntN(2)]
		keys := []string{line}
		switch r.IntN(20) {
		case 0:
			keys = append(keys, "nope")
		case 1, 2, 3, 4:
			keys = append(keys, "c")
		}
		var cost int64
		switch r.IntN(3) {
		case 0:
		case 1:
			cost = r.Int64N(100)
		default:
			cost = r.Int64N(10_000)
		}
		weight := []float64{0, 1, 2, 0.5, 0.25 + 3.75*r.Float64()}[r.IntN(5)]
		ps[i] = store.EnqueueParams{LimitKeys: keys, Cost: cost, Priority: r.IntN(3) - 1, Owner: "o",
			FairnessKey: []string{"", "", "t1", "t2", "t3", "t4", "t5"}[r.IntN(7)], Weight: weight}
	}
	return ps
}

// TestQueue_EnqueueFairTagsMatchThrottle: the enqueue statement tags a whole batch in SQL (sums of
// increments per line and fairness key, a running sum per ticket); on random batches, from random
// states of the lines' virtual time (moved by claims) and of the keys' finish tags, every ticket's
// start tag and every key's finish tag are what admit.FairTag gives, ticket after ticket in the
// order given, up to the rounding of the SQL's other order of additions. Tickets not written take
// no tag. The virtual time a claim stores is admit.FairAdvance over the tickets it admitted.
func TestQueue_EnqueueFairTagsMatchThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, rounds = 26, 8
	t.Logf("seed %d: %d rounds of a batch of up to 300 tickets and a claim", seed, rounds)
	r := rand.New(rand.NewPCG(seed, seed))
	q, _ := setup(t, throttle.Limit{Key: "a", MaxConcurrent: 1 << 20}, throttle.Limit{Key: "b", MaxConcurrent: 1 << 20},
		throttle.Limit{Key: "c", MaxConcurrent: 1 << 20})
	// The SQL adds a group's increments in another order than ticket after ticket: the tags agree to
	// a few units in the last place of the group's finish tag, far less than the smallest increment
	// (1/4: a weight of at most 4).
	near := func(want, got, scale float64, msg string, args ...any) {
		t.Helper()
		require.InDelta(t, want, got, 1e-10*math.Max(1, scale), append([]any{msg + " (seed %d)"}, append(args, seed)...)...)
	}

	for round := range rounds {
		st := readFairState(t, q)
		ps := randomFairBatch(r, 1+r.IntN(300))
		want := make([]float64, len(ps))
		written := make([]bool, len(ps))
		finish := st.finish
		for i, p := range ps {
			if written[i] = p.LimitKeys[len(p.LimitKeys)-1] != "nope"; !written[i] {
				continue
			}
			line, inc := p.LimitKeys[0], admit.FairIncrement(p.Cost, cmp.Or(p.Weight, 1))
			if p.FairnessKey == "" {
				want[i], _ = admit.FairTag(0, st.vtime[line], inc)
				continue
			}
			g := [2]string{line, p.FairnessKey}
			want[i], finish[g] = admit.FairTag(finish[g], st.vtime[line], inc)
		}

		ts, errs, err := q.EnqueueEach(ctx, ps)
		require.NoError(t, err)
		for i, p := range ps {
			if !written[i] {
				require.ErrorIs(t, errs[i], store.ErrUnknownLimit, "round %d ticket %d", round, i)
				continue
			}
			require.NoError(t, errs[i], "round %d ticket %d", round, i)
			near(want[i], ts[i].VStart, finish[[2]string{p.LimitKeys[0], p.FairnessKey}],
				"round %d ticket %d (line %s, key %q): start tag", round, i, p.LimitKeys[0], p.FairnessKey)
		}
		after := readFairState(t, q)
		require.Len(t, after.finish, len(finish), "round %d: a finish tag for each line and key that enqueued", round)
		for g, f := range finish {
			near(f, after.finish[g], f, "round %d: finish tag of %q", round, g)
		}

		// A claim moves the virtual time of the lines it admits on: admit.FairAdvance over the
		// start tags of what it admitted.
		res := claim(t, q, store.ClaimParams{Owner: "x", Max: 1 + r.IntN(80)})
		vtime := after.vtime
		for _, tk := range res.Admitted {
			vtime[tk.LineKey] = admit.FairAdvance(vtime[tk.LineKey], tk.VStart)
		}
		require.Equal(t, vtime, readFairState(t, q).vtime, "round %d: virtual time after the claim", round)
	}
}
