package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

func TestQueue_ClaimRunsTheClaimersOwnTickets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	mine := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "me"})
	theirs := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "them"})
	notifier := q.NewNotifier(nil)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = notifier.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	<-notifier.Listening()
	me, unsubscribeMe := notifier.Subscribe(store.TopicAdmitted("me"))
	defer unsubscribeMe()
	them, unsubscribeThem := notifier.Subscribe(store.TopicAdmitted("them"))
	defer unsubscribeThem()

	res := claim(t, q, store.ClaimParams{Owner: "me"})
	require.Len(t, res.Admitted, 2)
	states := map[int64]store.TicketState{}
	for _, tk := range res.Admitted {
		states[tk.ID] = tk.State
	}
	require.Equal(t, map[int64]store.TicketState{mine.ID: store.TicketStateRunning, theirs.ID: store.TicketStateAdmitted}, states)
	got, err := q.Ticket(ctx, mine.ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateRunning, got.State, "stored as the claim returned it")

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
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: mine.ID, OutcomeKind: store.OutcomeCompleted}))
	requireHealthy(t, q)
}

// A claim moves a listening owner's tickets straight to running and names them in the owner's
// notifications, several when they are many, so that the owner reads them (RunningTickets) with no
// take; a non-listening owner's are admitted and taken as before; an owner that stopped listening
// gets admitted tickets again.
func TestQueue_ClaimNamesListeningOwnersTickets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1000})
	_, err := q.RenewListening(ctx, "ear", time.Hour, true)
	require.NoError(t, err)
	_, err = q.RenewLease(ctx, "deaf", time.Hour)
	require.NoError(t, err)
	notifier := q.NewNotifier(nil)
	// Subscribed before the notifier runs, so that the wake it sends everyone at LISTEN reaches us.
	ear, unsubscribe := notifier.Subscribe(store.TopicAdmitted("ear"))
	defer unsubscribe()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = notifier.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	<-notifier.Listening()
	<-ear // the first wake, at LISTEN
	_, missed, woken := notifier.NotifiedIDs("ear")
	require.True(t, missed, "what was named before the subscription counts as missed")
	require.True(t, woken)

	// 450 tickets of the listening owner: more than one notification's worth of IDs.
	var want []int64
	for range 450 {
		want = append(want, enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "ear"}).ID)
	}
	deaf := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "deaf"})
	res := claim(t, q, store.ClaimParams{Owner: "claimer", Max: 1000})
	require.Len(t, res.Admitted, 451)

	var named []int64
	for len(named) < len(want) {
		<-ear
		got, missed, woken := notifier.NotifiedIDs("ear")
		require.False(t, missed)
		require.False(t, woken, "every notification named its tickets")
		named = append(named, got...)
	}
	slices.Sort(named)
	require.Equal(t, want, named, "every ticket named once")
	running, err := q.RunningTickets(ctx, "ear", named[:3])
	require.NoError(t, err)
	require.Equal(t, want[:3], ids(running), "moved straight to running, read by ID")
	all, err := q.RunningTickets(ctx, "ear", nil)
	require.NoError(t, err)
	require.Len(t, all, 450)
	taken, err := q.TakeAdmitted(ctx, "ear", 1000)
	require.NoError(t, err)
	require.Empty(t, taken, "nothing to take")
	taken, err = q.TakeAdmitted(ctx, "deaf", 10)
	require.NoError(t, err)
	require.Equal(t, []int64{deaf.ID}, ids(taken), "a non-listening owner's ticket is admitted and taken")

	require.NoError(t, q.StopListening(ctx, "ear"))
	late := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Owner: "ear"})
	claim(t, q, store.ClaimParams{Owner: "claimer"})
	got, err := q.Ticket(ctx, late.ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateAdmitted, got.State, "an owner that stopped listening takes its tickets")
	require.Empty(t, func() []int64 { ids, _, _ := notifier.NotifiedIDs("ear"); return ids }(), "and is not named them")

	for _, tk := range append(all, taken...) {
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, OutcomeKind: store.OutcomeCompleted}))
	}
	_, err = q.TakeAdmitted(ctx, "ear", 10)
	require.NoError(t, err)
}
