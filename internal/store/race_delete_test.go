package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// TestQueue_DeleteLimitRace races enqueuers naming a key (as their line and as another of their
// limits, alone and in batches) against its deletion, round after round: each round the enqueuers and
// the deleter start at once; whatever the interleaving, no ticket may be left naming a key that does
// not exist (it would wait forever). Then the round's tickets are claimed and completed, the key is
// deleted if it was in use, and created again for the next round.
func TestQueue_DeleteLimitRace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an outer bound only
	defer cancel()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	k := throttle.Limit{Key: "k", MaxConcurrent: 1_000_000}
	require.NoError(t, q.UpsertLimits(ctx, k, throttle.Limit{Key: "other", MaxConcurrent: 1_000_000}))
	orphans := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "sluice_ticket"}.Sanitize()+` t
			WHERE t.state IN ('queued', 'admitted', 'running') AND EXISTS (SELECT 1 FROM unnest(t.limit_keys) k
				WHERE NOT EXISTS (SELECT 1 FROM `+pgx.Identifier{schema, "sluice_limit"}.Sanitize()+` l WHERE l.key = k))`).Scan(&n))
		return n
	}
	drain := func() {
		for {
			res, err := q.Claim(ctx, store.ClaimParams{Max: 100})
			require.NoError(t, err)
			if len(res.Admitted) == 0 {
				return
			}
			ps := make([]store.CompleteParams, len(res.Admitted))
			for i, tk := range res.Admitted {
				ps[i] = store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}
			}
			_, err = q.CompleteMany(ctx, ps)
			require.NoError(t, err)
		}
	}

	const rounds, enqueuers = 150, 4
	var written, unknown, deletedFirst int
	for round := range rounds {
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, enqueuers)
		for e := range enqueuers {
			wg.Go(func() {
				<-start
				ps := []store.EnqueueParams{{LimitKeys: []string{"k", "other"}, Owner: "o", FairnessKey: fmt.Sprint("tenant-", e%2)}}
				switch e % 3 {
				case 1:
					ps[0].LimitKeys = []string{"other", "k"}
				case 2: // a batch: all or nothing
					ps = append(ps, store.EnqueueParams{LimitKeys: []string{"other"}, Owner: "o"})
				}
				_, errs[e] = q.EnqueueMany(ctx, ps)
				if errs[e] == nil {
					errs[e] = errors.New(fmt.Sprint(len(ps))) // how many were written, read below
				}
			})
		}
		var delErr error
		wg.Go(func() {
			<-start
			delErr = q.DeleteLimit(ctx, "k")
		})
		close(start)
		wg.Wait()
		for _, err := range errs {
			switch {
			case errors.Is(err, store.ErrUnknownLimit):
				unknown++
			case err.Error() == "1" || err.Error() == "2":
				written++
			default:
				t.Fatalf("round %d: enqueue: %v", round, err)
			}
		}
		require.Zero(t, orphans(), "round %d: tickets naming a deleted key", round)
		drain()
		if delErr == nil {
			deletedFirst++
		} else {
			require.ErrorIs(t, delErr, store.ErrLimitInUse, "round %d", round)
			require.NoError(t, q.DeleteLimit(ctx, "k"), "round %d: nothing unfinished names it once drained", round)
		}
		require.NoError(t, q.UpsertLimits(ctx, k))
	}
	t.Logf("%d rounds: %d enqueues written, %d refused as unknown; the deletion came first (nothing in use) in %d",
		rounds, written, unknown, deletedFirst)
	requireHealthy(t, q)
	require.Zero(t, orphans())
}
