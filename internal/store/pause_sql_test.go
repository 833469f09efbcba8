package store_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
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
	require.ErrorIs(t, q.Pause(ctx, "nope", t0), store.ErrUnknownLimit)
}

// TestQueue_SetPause: an operator's pause is set as given, shortening a provider's longer pause as
// readily as it extends it; one not after now lifts the pause and lets the held ticket in; each call
// wakes the claimers; an unknown key is refused. Pause still keeps the later pause.
func TestQueue_SetPause(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, b := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 1})
	conn, err := q.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{store.NotifyChannel}.Sanitize())
	require.NoError(t, err)
	woken := func(what string) {
		t.Helper()
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			require.NoError(t, err, "%s: no claimer was woken", what)
			if strings.HasPrefix(n.Payload, q.Schema()+"|") {
				return
			}
		}
	}
	pausedUntil := func() time.Time {
		t.Helper()
		st, err := q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		return st.State.PausedUntil
	}

	require.NoError(t, q.Pause(ctx, "openai", t0.Add(18*time.Minute)), "a provider's 429")
	require.NoError(t, q.SetPause(ctx, "openai", t0.Add(time.Minute)))
	require.Equal(t, t0.Add(time.Minute), pausedUntil().UTC(), "shortened from 18 minutes to 1")
	woken("shortened")
	require.NoError(t, q.SetPause(ctx, "openai", t0.Add(time.Hour)))
	require.Equal(t, t0.Add(time.Hour), pausedUntil().UTC(), "extended")
	woken("extended")
	require.NoError(t, q.Pause(ctx, "openai", t0.Add(time.Minute)))
	require.Equal(t, t0.Add(time.Hour), pausedUntil().UTC(), "Pause keeps the later pause")

	tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai"}})
	woken("enqueue")
	require.Empty(t, claim(t, q, store.ClaimParams{}).Admitted, "paused")
	require.NoError(t, q.SetPause(ctx, "openai", b.clock.Now()))
	require.True(t, pausedUntil().IsZero(), "a pause until now is lifted")
	woken("lifted")
	require.Equal(t, []int64{tk.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted))
	require.NoError(t, q.SetPause(ctx, "openai", t0.Add(-time.Hour)))
	require.True(t, pausedUntil().IsZero(), "a pause in the past is none")

	err = q.SetPause(ctx, "nope", t0.Add(time.Minute))
	require.ErrorIs(t, err, store.ErrUnknownLimit)
	require.ErrorContains(t, err, `"nope"`)
}
