package pgqueue_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// TestQueue_PauseMatchesThrottle: Pause keeps the later of the pause in force and the new one in SQL
// (greatest, in the UPDATE that takes the row's lock, rather than a read first); on random pauses,
// before and after t0 and past ones included, and resumes, the pause stored is throttle's
// State.Pause folded over them.
func TestQueue_PauseMatchesThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seed, steps = 26, 40
	t.Logf("seed %d: %d pauses and resumes", seed, steps)
	r := rand.New(rand.NewPCG(seed, seed))
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})

	var want throttle.State
	for i := range steps {
		if r.IntN(8) == 0 {
			require.NoError(t, q.Resume(ctx, "k"))
			want.PausedUntil = time.Time{}
		} else {
			until := t0.Add(time.Duration(r.Int64N(int64(2*time.Hour))) - time.Hour).Truncate(time.Microsecond)
			require.NoError(t, q.Pause(ctx, "k", until))
			want = want.Pause(until)
		}
		st, err := q.LimitStatus(ctx, "k")
		require.NoError(t, err)
		require.True(t, want.PausedUntil.Equal(st.State.PausedUntil), "step %d (seed %d): paused until %v, want %v",
			i, seed, st.State.PausedUntil, want.PausedUntil)
	}
	require.ErrorIs(t, q.Pause(ctx, "nope", t0), pgqueue.ErrUnknownLimit)
}
