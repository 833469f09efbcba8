package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// completions returns a completion request for each ticket, in order.
func completions(ts ...store.Ticket) []*completion {
	out := make([]*completion, len(ts))
	for i, tk := range ts {
		out[i] = &completion{done: make(chan error, 1),
			p: store.CompleteParams{TicketID: tk.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}}
	}
	return out
}

// A permanent error for one completion of a group commit answers that completion alone; the rest of
// the batch is recorded. The completer used to retry such an error for two minutes, then fail every
// completion of the batch with it.
func TestCompleter_IsolatesABadItem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()

	t.Run("TicketGivenTwice", func(t *testing.T) {
		cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 10})
		c := newDispatcher(t, cfg).completer
		ts := admitted(t, cfg.Queue, 2)
		batch := completions(ts[0], ts[0], ts[1])
		c.commit(ctx, batch)
		require.NoError(t, <-batch[0].done)
		require.ErrorContains(t, <-batch[1].done, fmt.Sprintf("ticket %d was completed twice in one batch", ts[0].ID))
		require.NoError(t, <-batch[2].done)
	})

	t.Run("TicketPostgresRefuses", func(t *testing.T) {
		cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 10})
		c := newDispatcher(t, cfg).completer
		ts := admitted(t, cfg.Queue, 5)
		bad := ts[3]
		// A trigger refuses the bad ticket's completion: a constraint the statement breaks, for it alone.
		s := pgx.Identifier{cfg.Queue.Schema()}.Sanitize()
		_, err := cfg.Queue.Pool().Exec(ctx, fmt.Sprintf(`CREATE FUNCTION %[1]s.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.id = %[2]d AND NEW.state = 'finished' THEN
					RAISE EXCEPTION 'refused ticket %%', NEW.id USING ERRCODE = '23514';
				END IF;
				RETURN NEW;
			END $$;
			CREATE TRIGGER refuse BEFORE UPDATE ON %[1]s.sluice_ticket FOR EACH ROW EXECUTE FUNCTION %[1]s.refuse()`, s, bad.ID))
		require.NoError(t, err)
		batch := completions(ts...)
		c.commit(ctx, batch)
		for i, req := range batch {
			if ts[i].ID == bad.ID {
				require.ErrorContains(t, <-req.done, fmt.Sprintf("refused ticket %d", bad.ID))
			} else {
				require.NoError(t, <-req.done, "ticket %d", ts[i].ID)
			}
		}
		st, err := cfg.Queue.LimitStatus(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, 1, st.State.InflightCount, "only the refused ticket still holds its slot")
	})
}

// After a 429 the runner puts the run back in line. A claim may admit it again, and its new run
// begin, the moment the requeue commits: the invocation must be marked queued before that, never
// after, or the new run's state (its cancel function) is wiped and a cancellation no longer reaches
// it. The hook holds the requeue path right after its statement until the new run has begun.
func TestRunner_RequeueRaceKeepsTheNewRun(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	second, cause := make(chan struct{}), make(chan error, 1)
	var runs atomic.Int64
	d.runner.testHookRequeued = func(store.Ticket) {
		select {
		case <-second:
		case <-ctx.Done():
		}
	}
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	inv := enqueue(t, d, "limited", func(ctx context.Context) (any, error) {
		if runs.Add(1) == 1 {
			return nil, sluiceactivity.RateLimitedFor(ctx, 0)
		}
		close(second)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	select {
	case <-second:
	case <-ctx.Done():
		t.Fatal("the requeued run was never admitted again")
	}
	// The first run's goroutine ends once the requeue path has returned: then one run is left.
	waitFor(t, ctx, "the requeue path to return", func() bool {
		d.runner.mu.Lock()
		defer d.runner.mu.Unlock()
		return d.runner.runs == 1
	})
	_, running, _ := inv.state()
	require.True(t, running, "the new run is still marked running")
	errCancelled := errors.New("cancelled by the test")
	inv.cancelRun(errCancelled)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, errCancelled, "the cancellation reached the new run")
	case <-ctx.Done():
		t.Fatal("the cancellation never reached the new run")
	}
}

// The self-check takes and runs an admitted ticket of this process that nothing took: here the take
// loop is stopped and nothing notifies, as if every take's answer had been lost.
func TestSelfCheck_TakesWhatWasLeftAdmitted(t *testing.T) {
	cfg := testConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	var reconciled atomic.Int64
	cfg.Logger = slog.New(countHandler{Handler: cfg.Logger.Handler(), msg: msgReconciled, n: &reconciled})
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	d := newDispatcher(t, cfg)
	checked := &d.selfChecker.signals.Checked
	checked.Init()
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { d.Stop(context.Background()) })
	require.NoError(t, d.claimer.Stop(ctx))
	require.NoError(t, d.runner.Stop(ctx)) // the take loop; runs still start
	ran := make(chan struct{})
	release := heldAtEnqueue(t, cfg.Queue, "k")
	enqueue(t, d, "left", func(context.Context) (any, error) { close(ran); return "done", nil })
	release()
	res, err := cfg.Queue.Claim(ctx, store.ClaimParams{Owner: "another-replica"})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	require.Equal(t, 1, checked.WaitUntil(t, func(n int) bool { return n > 0 }), "one check reconciled the ticket")
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("the self-check never ran the admitted ticket")
	}
	require.EqualValues(t, 1, reconciled.Load(), "and said so once")
	waitFor(t, ctx, "the ticket to finish", func() bool {
		tk, err := cfg.Queue.Ticket(ctx, res.Admitted[0].ID)
		return err != nil || tk.State == store.TicketStateFinished
	})
}

// outcomeLog is an outcomeRecorder that records nothing in Postgres: it keeps the tickets it was
// given and reports them unrecorded, so that nothing is delivered.
type outcomeLog struct {
	mu  sync.Mutex
	got []store.Ticket
}

func (l *outcomeLog) Record(_ context.Context, t store.Ticket, _ runReport, _ bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, t)
	return false
}

func (l *outcomeLog) tickets() []store.Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// takenBundle is an unstarted dispatcher holding one invocation whose ticket its own claim has taken
// (running in Postgres, no run begun), for tests to drive the runner from there.
type takenBundle struct {
	d        *Dispatcher
	cfg      testSetup
	inv      *Invocation
	taken    store.Ticket
	active   atomic.Bool   // the activity is running
	started  chan struct{} // closed when the activity starts
	outcomes *outcomeLog
}

func takenSetup(t *testing.T, ctx context.Context, deadline time.Time) *takenBundle {
	t.Helper()
	b := &takenBundle{cfg: dbConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 1}), started: make(chan struct{}), outcomes: &outcomeLog{}}
	b.d = newDispatcher(t, b.cfg) // not started: the test drives the services itself
	b.d.runner.recorder = b.outcomes
	b.inv = NewInvocation(InvocationParams{Key: InvocationKey("default", "gone", "run", "1", 1), Context: context.Background(),
		TaskToken: []byte("not-a-task-token"), Namespace: "default", Line: "k", Deadline: deadline,
		Run: func(ctx context.Context) (any, error) {
			b.active.Store(true)
			defer b.active.Store(false)
			close(b.started)
			<-ctx.Done()
			return nil, ctx.Err()
		}}, time.Now())
	require.NoError(t, b.d.deps.reg.acquire(ctx))
	b.d.deps.reg.hold(b.inv)
	tk, err := b.cfg.Queue.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 10, Owner: b.cfg.Owner,
		Namespace: "default", WorkflowID: "gone", RunID: "run", ActivityID: "1", ActivityType: "Test", Attempt: 1,
		TaskToken: []byte("not-a-task-token")})
	require.NoError(t, err)
	b.inv.setTicket(tk.ID)
	res, err := b.cfg.Queue.Claim(ctx, store.ClaimParams{Owner: b.cfg.Owner})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	b.taken = res.Admitted[0]
	require.Equal(t, store.TicketStateRunning, b.taken.State, "the owner's own claim takes the ticket")
	t.Cleanup(func() { // a run that began wrongly is ended, so that no goroutine outlives the test
		b.inv.cancelRun(errStopping)
		<-b.d.runner.idleCh()
	})
	return b
}

// runBetween runs the taken ticket, calling between once the runner has looked the invocation up,
// before the run begins, and reports whether a run began; if one did, its activity has started.
func (b *takenBundle) runBetween(t *testing.T, between func()) bool {
	t.Helper()
	b.d.runner.testHookLookedUp = func(_ store.Ticket, looked *Invocation) {
		require.Same(t, b.inv, looked)
		between()
	}
	b.d.runner.run(b.taken)
	b.d.runner.mu.Lock()
	began := b.d.runner.runs > 0
	b.d.runner.mu.Unlock()
	if began {
		<-b.started
	}
	return began
}

// requireReleasedOnce checks that the ticket ended handed back, its activity not running, and that
// the limit holds nothing and agrees with its tickets (Verify): released once.
func (b *takenBundle) requireReleasedOnce(t *testing.T, ctx context.Context) {
	t.Helper()
	got, err := b.cfg.Queue.Ticket(ctx, b.taken.ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateFinished, got.State)
	require.Equal(t, store.OutcomeHandedBack, got.OutcomeKind)
	require.False(t, b.active.Load(), "the ticket was handed back, its slot freed, while its activity runs")
	problems, err := b.cfg.Queue.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, problems)
	st, err := b.cfg.Queue.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Zero(t, st.State.InflightCount, "the reservation was released, once")
	require.Zero(t, st.State.InflightTokens)
}

// Temporal answers a queued invocation's heartbeat with NotFound after the runner has taken its
// ticket and looked the invocation up, before the run begins. The heartbeater's Cancel finds the
// ticket running, so it lets the invocation go. The run must then not begin: begun, it ran
// unregistered, and two self-checks later its ticket was handed back, its concurrency slot freed,
// while the activity still ran. The runner hands the ticket back instead, releasing it once.
func TestRunner_ActivityGoneBetweenTakeAndRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	b := takenSetup(t, ctx, time.Time{})
	began := b.runBetween(t, func() {
		b.d.heartbeater.interrupt(b.inv, errActivityGone) // what a heartbeat answered NotFound does
	})
	require.Nil(t, b.d.deps.reg.lookup(b.inv.Key()), "the heartbeater let the invocation go")

	// The self-check acts on a mismatch the second check in a row sees.
	b.d.deps.stopping.Store(false) // the self-check leaves a stopped dispatcher's tickets alone
	b.d.selfChecker.strikes = map[int64]reconcileAction{}
	b.d.selfChecker.selfCheck(ctx)
	b.d.selfChecker.selfCheck(ctx)

	b.requireReleasedOnce(t, ctx)
	require.False(t, began, "a run began of an invocation the heartbeater let go")
	require.Empty(t, b.outcomes.tickets(), "no run, no outcome")
}

// The other paths that let a held invocation go while its ticket may be taken have the same window
// between the runner's lookup and the run's begin: none lets a run begin unregistered.
func TestRunner_LetGoBetweenTakeAndRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()

	t.Run("ForgetterSweepsExpired", func(t *testing.T) {
		deadline := time.Now()
		b := takenSetup(t, ctx, deadline)
		forgot := &b.d.forgetter.signals.Forgot
		forgot.Init()
		began := b.runBetween(t, func() { b.d.forgetter.forgetExpired(deadline.Add(time.Minute)) })
		require.Equal(t, []*Invocation{b.inv}, forgot.WaitOrTimeout(t))
		require.False(t, began, "a run began of an invocation the forgetter swept")
		require.Nil(t, b.d.deps.reg.lookup(b.inv.Key()))
		b.requireReleasedOnce(t, ctx)
	})

	t.Run("StopHandsBack", func(t *testing.T) {
		b := takenSetup(t, ctx, time.Time{})
		began := b.runBetween(t, func() { // handBackOwn's hand-back, without its deliveries to Temporal
			back, err := b.cfg.Queue.HandBack(ctx, store.HandBackParams{Owner: b.cfg.Owner})
			require.NoError(t, err)
			require.Len(t, back, 1)
			b.d.deps.reg.dropTicket(back[0], errStopping)
		})
		require.False(t, began, "a run began after the stop handed its ticket back")
		require.Nil(t, b.d.deps.reg.lookup(b.inv.Key()))
		b.requireReleasedOnce(t, ctx)
	})
}
