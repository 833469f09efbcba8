package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

func TestQueue_Lifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OwnerTakesAdmittedOnce", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
		mine := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "w1"})
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "w2"})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 2)
		got, err := q.TakeAdmitted(ctx, "w1", 10)
		require.NoError(t, err)
		require.Equal(t, []int64{mine.ID}, ids(got))
		require.Equal(t, store.TicketStateRunning, got[0].State)
		got, err = q.TakeAdmitted(ctx, "w1", 10)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("CompleteStoresOutcomeThenDeliveryDeletes", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1, TokensPerMinute: 6000})
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100, TaskToken: []byte("tok")})
		claim(t, q, store.ClaimParams{})
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: 70, OutcomeKind: "result", Outcome: []byte("payload")}))
		require.ErrorIs(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID}), store.ErrNotFound, "completing twice")
		got, err := q.Ticket(ctx, tk.ID)
		require.NoError(t, err)
		require.Equal(t, store.TicketStateFinished, got.State)
		require.Equal(t, int64(70), got.ActualCost)
		requireHealthy(t, q)

		ds, err := q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, []byte("payload"), ds[0].Outcome)
		require.Equal(t, []byte("tok"), ds[0].TaskToken)
		ds, err = q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Empty(t, ds, "a delivery in progress is not handed out again before its retry time")
		b.clock.Add(time.Minute)
		ds, err = q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 1, "an unacknowledged delivery is retried")
		require.Equal(t, 2, ds[0].Deliveries)
		require.NoError(t, q.Delivered(ctx, tk.ID))
		_, err = q.Ticket(ctx, tk.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("RequeueKeepsPlaceAndPausesKeys", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		first := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		second := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		require.Equal(t, []int64{first.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted))
		require.NoError(t, q.Requeue(ctx, store.RequeueParams{TicketID: first.ID, ActualCost: 0,
			PauseKeys: []string{"k"}, PauseUntil: t0.Add(10 * time.Second)}))
		requireHealthy(t, q)
		res := claim(t, q, store.ClaimParams{})
		require.Empty(t, res.Admitted)
		require.Equal(t, throttle.ReasonPaused, res.Blocked["k"])
		b.clock.Add(10 * time.Second)
		require.Equal(t, []int64{first.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted), "back at the head, ahead of %d", second.ID)
		got, err := q.Ticket(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Requeues)
		require.ErrorIs(t, q.Requeue(ctx, store.RequeueParams{TicketID: second.ID}), store.ErrNotFound, "a queued ticket")
	})

	t.Run("CancelReleasesAnAdmittedTicket", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		bq := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		c := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		claim(t, q, store.ClaimParams{})
		require.NoError(t, q.Cancel(ctx, a.ID))
		require.NoError(t, q.Cancel(ctx, bq.ID))
		require.ErrorIs(t, q.Cancel(ctx, bq.ID), store.ErrNotFound)
		requireHealthy(t, q)
		require.Equal(t, []int64{c.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted))
		_, err := q.TakeAdmitted(ctx, "owner-1", 1)
		require.NoError(t, err)
		require.ErrorIs(t, q.Cancel(ctx, c.ID), store.ErrNotFound, "a running ticket is cancelled through its context")
	})

	t.Run("DeadOwnersTicketsAreHandedBackAndRetriesKeepTheirPlace", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		for owner, ttl := range map[string]time.Duration{"dead": 10 * time.Second, "alive": time.Hour} {
			lapsed, err := q.RenewLease(ctx, owner, ttl)
			require.NoError(t, err)
			require.False(t, lapsed, "a new lease has not lapsed")
		}
		ident := store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "dead", Namespace: "default",
			WorkflowID: "wf", RunID: "r", ActivityID: "1", Attempt: 1, TaskToken: []byte("t1")}
		running := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "dead", Namespace: "default", WorkflowID: "wf", RunID: "r", ActivityID: "0"})
		claim(t, q, store.ClaimParams{})
		_, err := q.TakeAdmitted(ctx, "dead", 10)
		require.NoError(t, err)
		queued := enqueue(t, q, ident)
		behind := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "alive"})

		got, err := q.HandBack(ctx, store.HandBackParams{})
		require.NoError(t, err)
		require.Empty(t, got, "the lease has not lapsed")
		b.clock.Add(11 * time.Second)
		got, err = q.HandBack(ctx, store.HandBackParams{})
		require.NoError(t, err)
		require.ElementsMatch(t, []int64{running.ID, queued.ID}, ids(got))
		for _, tk := range got {
			require.Equal(t, store.OutcomeHandedBack, tk.OutcomeKind)
		}
		lapsed, err := q.RenewLease(ctx, "alive", time.Hour)
		require.NoError(t, err)
		require.False(t, lapsed, "a lease renewed within its ttl has not lapsed")
		lapsed, err = q.RenewLease(ctx, "dead", 10*time.Second)
		require.NoError(t, err)
		require.True(t, lapsed, "the owner renewing a lease that expired hears that it lapsed")
		lapsed, err = q.RenewLease(ctx, "dead", 10*time.Second)
		require.NoError(t, err)
		require.False(t, lapsed, "once renewed, the lease holds again")
		requireHealthy(t, q)

		// A survivor reports the hand-back to Temporal, which schedules attempt 2 on a live worker.
		ds, err := q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, ds, 2)
		for _, d := range ds {
			require.NoError(t, q.Delivered(ctx, d.ID))
		}
		retry := ident
		retry.Owner, retry.Attempt, retry.TaskToken = "alive", 2, []byte("t2")
		r := enqueue(t, q, retry)
		require.Equal(t, queued.Seq, r.Seq, "the retry keeps its place in line")
		require.Equal(t, []int64{r.ID}, ids(claim(t, q, store.ClaimParams{}).Admitted), "ahead of %d", behind.ID)
		_, err = q.Ticket(ctx, queued.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "the returned row is consumed by the retry")
	})

	t.Run("GracefulStopHandsBackOwnTickets", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		_, err := q.RenewLease(ctx, "me", time.Hour)
		require.NoError(t, err)
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "me"})
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "other"})
		got, err := q.HandBack(ctx, store.HandBackParams{Owner: "me"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "me", got[0].Owner)
		require.NoError(t, q.DropLease(ctx, "me"))
	})

	t.Run("PruneRemovesOldReturnedTickets", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "gone"})
		_, err := q.HandBack(ctx, store.HandBackParams{})
		require.NoError(t, err)
		require.NoError(t, q.Delivered(ctx, tk.ID))
		got, err := q.Ticket(ctx, tk.ID)
		require.NoError(t, err)
		require.Equal(t, store.TicketStateReturned, got.State)
		b.clock.Add(2 * time.Hour)
		_, err = q.Prune(ctx, store.PruneParams{})
		require.NoError(t, err)
		_, err = q.Ticket(ctx, tk.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("LeaseInputIsChecked", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		_, err := q.RenewLease(ctx, "", time.Second)
		require.ErrorContains(t, err, "owner must not be empty")
		_, err = q.RenewLease(ctx, "w", -time.Second)
		require.ErrorContains(t, err, "ttl must be > 0, got -1s")
	})
}

func TestNotifier(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	n := q.NewNotifier(nil)
	work, stopWork := n.Subscribe(store.TopicWork())
	defer stopWork()
	admitted, stopAdmitted := n.Subscribe(store.TopicAdmitted("w1"))
	defer stopAdmitted()
	other, stopOther := n.Subscribe(store.TopicAdmitted("w2"))
	defer stopOther()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	<-n.Listening()
	drain := func(ch <-chan struct{}) {
		select {
		case <-ch:
		default:
		}
	}
	// Listening wakes everyone once, for what was sent before, before it is closed; start from
	// quiet channels.
	drain(work)
	drain(admitted)
	drain(other)

	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "w1"})
	select {
	case <-work:
	case <-time.After(time.Minute):
		t.Fatal("no work notification after enqueue")
	}
	claim(t, q, store.ClaimParams{})
	select {
	case <-admitted:
	case <-time.After(time.Minute):
		t.Fatal("no admitted notification for the owner")
	}
	select {
	case <-other:
		t.Fatal("another owner was woken")
	default:
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
