package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// A Notifier given a URL listens on a connection of its own and takes none from the pool; one
// told not to listen is ready at once and wakes no one.
func TestNotifier_Listen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, _ := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5})

	run := func(l store.Listen) (*store.Notifier, <-chan struct{}) {
		n := q.NewNotifier(nil).WithListen(l)
		work, unsubscribe := n.Subscribe(store.TopicWork())
		nctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.Run(nctx) }()
		t.Cleanup(func() {
			stop()
			require.ErrorIs(t, <-done, context.Canceled)
			unsubscribe()
		})
		<-n.Listening()
		// Listening wakes every subscriber once (what was sent before it is lost): drain that wake.
		select {
		case <-work:
		default:
		}
		return n, work
	}

	app := "listen-" + q.Schema()
	url, sep := testdb.URL(t), "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	_, direct := run(store.Listen{URL: url + sep + "application_name=" + app})
	_, off := run(store.Listen{Off: true})
	var listening int
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&listening))
	require.Equal(t, 1, listening, "the notifier given a URL listens on a connection of its own")
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 1})
	select {
	case <-direct:
	case <-ctx.Done():
		t.Fatal("the notifier listening on its own connection heard no work")
	}
	select {
	case <-off:
		t.Fatal("a notifier that does not listen woke its subscriber")
	default:
	}
}
