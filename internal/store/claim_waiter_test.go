package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// A claim reports WaitsOnRelease exactly when a completion could change its outcome.
func TestClaim_WaitsOnRelease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		limit throttle.Limit
		keys  []string // of the second ticket; the first draws on "k"
		admit bool     // the second ticket is admitted
		want  bool
	}{
		{"Room", throttle.Limit{Key: "k", MaxConcurrent: 10}, []string{"k"}, true, false},
		{"Concurrency", throttle.Limit{Key: "k", MaxConcurrent: 1}, []string{"k"}, false, true},
		{"InflightTokens", throttle.Limit{Key: "k", MaxInflightTokens: 100}, []string{"k"}, false, true},
		{"Rate", throttle.Limit{Key: "k", RequestsPerSecond: 0.001, Burst: 1}, []string{"k"}, false, false},
		{"OtherLimitFull", throttle.Limit{Key: "k", MaxConcurrent: 1}, []string{"line", "k"}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, _ := setup(t, tc.limit, throttle.Limit{Key: "line", MaxConcurrent: 10})
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100})
			require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
			enqueue(t, q, store.EnqueueParams{LimitKeys: tc.keys, Cost: 100})
			res := claim(t, q, store.ClaimParams{})
			require.Equal(t, tc.admit, len(res.Admitted) == 1, "admitted: %v", res.Admitted)
			require.Equal(t, tc.want, res.WaitsOnRelease)
		})
	}
}

// A ClaimWaiter wakes for a completion's release only when told its claim waits for one; work
// always wakes it.
func TestClaimWaiter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	n := q.NewNotifier(nil)
	nctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(nctx) }()
	defer func() { stop(); <-done }()
	<-n.Listening()
	waiter := n.ClaimWaiter()
	defer waiter.Close()

	// release has the waiter's subscriptions fired by a completion: a probe subscribed with it
	// hears it once the notifier has fired every subscriber.
	release := func() {
		probe, unsubscribe := n.Subscribe(store.TopicReleased())
		defer unsubscribe()
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		require.True(t, waiter.Wait(ctx, false, time.Hour), "the enqueue's work wakes it")
		tk := claim(t, q, store.ClaimParams{}).Admitted[0]
		found, err := q.CompleteMany(ctx, []store.CompleteParams{{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, found)
		select {
		case <-probe:
		case <-ctx.Done():
			t.Fatal("no release notification")
		}
	}

	release()
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	require.False(t, waiter.Wait(short, false, time.Hour), "a release wakes no claimer whose tickets wait for none")

	release()
	require.True(t, waiter.Wait(ctx, true, time.Hour), "a release wakes a claimer whose tickets wait for one")
}
