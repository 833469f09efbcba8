package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uber-go/tally/v4"
	temporaltally "go.temporal.io/sdk/contrib/tally"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/throttle"
)

// The maintenance services each run one job on a ticker. Each test starts its service alone, with
// its test signal initialised, and waits for the pass itself rather than for its effects.

// startAlone starts s for the test and stops it at its end.
func startAlone(t *testing.T, s service) {
	t.Helper()
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
}

// ownerTable is the schema's sluice_owner, quoted.
func ownerTable(q *store.Queue) string {
	return pgx.Identifier{q.Schema(), "sluice_owner"}.Sanitize()
}

func TestLeaseRenewer_Renews(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cfg := dbConfig(t)
	cfg.LeaseTTL = 1500 * time.Millisecond // renewed every 500ms
	l := newDispatcher(t, cfg).leaseRenewer
	l.signals.Renewed.Init()
	startAlone(t, l)

	first := l.signals.Renewed.WaitOrTimeout(t)
	require.NoError(t, first.err)
	require.False(t, first.lapsed, "a lease taken for the first time did not lapse")
	var left time.Duration
	require.NoError(t, cfg.Queue.Pool().QueryRow(ctx, `SELECT lease_expires_at - clock_timestamp() FROM `+ownerTable(cfg.Queue)+
		` WHERE id = $1`, cfg.Owner).Scan(&left))
	require.Positive(t, left, "the lease is live")

	// A process starved past its lease: the next renewal takes it again, and says it had lapsed.
	_, err := cfg.Queue.Pool().Exec(ctx, `UPDATE `+ownerTable(cfg.Queue)+` SET lease_expires_at = clock_timestamp() - interval '1 minute'
		WHERE id = $1`, cfg.Owner)
	require.NoError(t, err)
	r := l.signals.Renewed.WaitUntil(t, func(r renewal) bool { return r.lapsed })
	require.NoError(t, r.err)
}

// A renewal that fails (the database away, here its table) is tried again within leaseRetry rather
// than at the next LeaseTTL/3, so that a lease outlives an outage of more than one interval.
func TestLeaseRenewer_RetriesAFailedRenewalSoon(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cfg := dbConfig(t)
	cfg.LeaseTTL = 3 * time.Second // renewed every 1s, retried every leaseRetry
	l := newDispatcher(t, cfg).leaseRenewer
	l.signals.Renewed.Init()
	moved := pgx.Identifier{cfg.Queue.Schema(), "sluice_owner_away"}.Sanitize()
	_, err := cfg.Queue.Pool().Exec(ctx, `ALTER TABLE `+ownerTable(cfg.Queue)+` RENAME TO sluice_owner_away`)
	require.NoError(t, err)
	startAlone(t, l)

	failed := l.signals.Renewed.WaitOrTimeout(t)
	require.Error(t, failed.err)
	require.Equal(t, leaseRetry, failed.next, "a failed renewal is retried soon")
	_, err = cfg.Queue.Pool().Exec(ctx, `ALTER TABLE `+moved+` RENAME TO sluice_owner`)
	require.NoError(t, err)
	ok := l.signals.Renewed.WaitUntil(t, func(r renewal) bool { return r.err == nil })
	require.Equal(t, cfg.LeaseTTL/3, ok.next, "once renewed, the lease is renewed every LeaseTTL/3 again")
}

func TestRescuer_HandsBackDeadOwnersTickets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cfg := dbConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5})
	enqueueFor := func(owner string) store.Ticket {
		tk, err := cfg.Queue.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 10, Owner: owner,
			Namespace: "default", WorkflowID: owner, RunID: "run", ActivityID: "1", Attempt: 1})
		require.NoError(t, err)
		return tk
	}
	_, err := cfg.Queue.RenewLease(ctx, "alive", time.Hour)
	require.NoError(t, err)
	dead, alive := enqueueFor("dead"), enqueueFor("alive") // "dead" has no lease
	res, err := cfg.Queue.Claim(ctx, store.ClaimParams{})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)

	r := newDispatcher(t, cfg).rescuer
	r.signals.Rescued.Init()
	startAlone(t, r)
	back := r.signals.Rescued.WaitUntil(t, func(back []store.Ticket) bool { return len(back) > 0 })
	require.Len(t, back, 1)
	require.Equal(t, dead.ID, back[0].ID, "the dead owner's ticket, and only it")
	got, err := cfg.Queue.Ticket(ctx, dead.ID)
	require.NoError(t, err)
	require.Equal(t, store.OutcomeHandedBack, got.OutcomeKind)
	got, err = cfg.Queue.Ticket(ctx, alive.ID)
	require.NoError(t, err)
	require.Equal(t, store.TicketStateAdmitted, got.State, "a live owner's ticket is left alone")
	st, err := cfg.Queue.LimitStatus(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 1, st.State.InflightCount, "the dead owner's slot was released")
}

func TestGauger_PublishesInflight(t *testing.T) {
	t.Parallel()
	cfg := dbConfig(t, throttle.Limit{Key: "k", MaxConcurrent: 5}, throttle.Limit{Key: "idle", MaxConcurrent: 1})
	cfg.Routes = map[string][]string{"A": {"k"}, "B": {"idle", "k"}}
	scope := tally.NewTestScope("", nil)
	cfg.MetricsHandler = temporaltally.NewMetricsHandler(scope)
	admitted(t, cfg.Queue, 2)

	g := newDispatcher(t, cfg).gauger
	g.signals.Published.Init()
	startAlone(t, g)
	require.Equal(t, []string{"idle", "k"}, g.signals.Published.WaitOrTimeout(t), "every key the routes name, once")
	gauges := map[string]float64{}
	for _, gs := range scope.Snapshot().Gauges() {
		gauges[gs.Name()+"/"+gs.Tags()["sluice_key"]] = gs.Value()
	}
	require.Equal(t, map[string]float64{
		telemetry.MetricInflight + "/k": 2, telemetry.MetricInflightTokens + "/k": 20,
		telemetry.MetricInflight + "/idle": 0, telemetry.MetricInflightTokens + "/idle": 0,
	}, gauges)
}

func TestForgetter_ForgetsExpiredInvocations(t *testing.T) {
	t.Parallel()
	d := newDispatcher(t, dbConfig(t))
	hold := func(name string, deadline time.Time) *Invocation {
		inv := NewInvocation(InvocationParams{Key: InvocationKey("default", name, "run", "1", 1), Context: context.Background(),
			Run: func(context.Context) (any, error) { return nil, nil }, Deadline: deadline}, time.Now())
		require.NoError(t, d.deps.reg.acquire(context.Background()))
		d.deps.reg.hold(inv)
		return inv
	}
	expired := hold("expired", time.Now().Add(-time.Minute))
	live := hold("live", time.Now().Add(time.Hour))
	none := hold("no-deadline", time.Time{})

	f := d.forgetter
	f.signals.Forgot.Init()
	startAlone(t, f)
	forgot := f.signals.Forgot.WaitUntil(t, func(invs []*Invocation) bool { return len(invs) > 0 })
	require.Equal(t, []*Invocation{expired}, forgot)
	require.Nil(t, d.deps.reg.lookup(expired.Key()))
	require.Same(t, live, d.deps.reg.lookup(live.Key()), "an invocation before its deadline is kept")
	require.Same(t, none, d.deps.reg.lookup(none.Key()), "an invocation without a deadline is kept")
}

func TestPruner_PrunesLapsedOwners(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	cfg := dbConfig(t)
	for _, owner := range []string{"gone", "alive"} {
		_, err := cfg.Queue.RenewLease(ctx, owner, time.Hour)
		require.NoError(t, err)
	}
	_, err := cfg.Queue.Pool().Exec(ctx, `UPDATE `+ownerTable(cfg.Queue)+` SET lease_expires_at = clock_timestamp() - interval '2 hours'
		WHERE id = 'gone'`)
	require.NoError(t, err)

	p := newDispatcher(t, cfg).pruner
	require.Equal(t, pruneEvery, p.interval, "the default")
	p.interval = 10 * time.Millisecond // not a minute, for the test
	p.signals.Pruned.Init()
	startAlone(t, p)
	require.NoError(t, p.signals.Pruned.WaitOrTimeout(t))
	rows, err := cfg.Queue.Pool().Query(ctx, `SELECT id FROM `+ownerTable(cfg.Queue)+` ORDER BY id`)
	require.NoError(t, err)
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"alive"}, owners, "the owner whose lease lapsed an hour ago was pruned")
}
