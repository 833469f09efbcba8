package pgqueue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

func TestQueue_ClaimRunsTheClaimersOwnTickets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	mine := enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"k"}, Owner: "me"})
	theirs := enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"k"}, Owner: "them"})
	notifier := q.NewNotifier(nil)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = notifier.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	<-notifier.Listening()
	me, unsubscribeMe := notifier.Subscribe(pgqueue.TopicAdmitted("me"))
	defer unsubscribeMe()
	them, unsubscribeThem := notifier.Subscribe(pgqueue.TopicAdmitted("them"))
	defer unsubscribeThem()

	res := claim(t, q, pgqueue.ClaimParams{Owner: "me"})
	require.Len(t, res.Admitted, 2)
	states := map[int64]pgqueue.TicketState{}
	for _, tk := range res.Admitted {
		states[tk.ID] = tk.State
	}
	require.Equal(t, map[int64]pgqueue.TicketState{mine.ID: pgqueue.TicketStateRunning, theirs.ID: pgqueue.TicketStateAdmitted}, states)
	got, err := q.Ticket(ctx, mine.ID)
	require.NoError(t, err)
	require.Equal(t, pgqueue.TicketStateRunning, got.State, "stored as the claim returned it")

	taken, err := q.TakeAdmitted(ctx, "me", 10)
	require.NoError(t, err)
	require.Empty(t, taken, "the claimer's own ticket needs no take")
	taken, err = q.TakeAdmitted(ctx, "them", 10)
	require.NoError(t, err)
	require.Equal(t, []int64{theirs.ID}, ids(taken))

	// Notifications go out in owner order ("me" before "them") from one commit, and the notifier
	// fires them in order: once "them" has fired, a notification of "me" would have too.
	<-them
	select {
	case <-me:
		t.Fatal("the claimer was notified of its own admission")
	default:
	}
	require.NoError(t, q.Complete(ctx, pgqueue.CompleteParams{TicketID: mine.ID, OutcomeKind: pgqueue.OutcomeCompleted}))
	requireHealthy(t, q)
}
