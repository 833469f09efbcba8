package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

const fleetSeed = 25 // seeds the fleet's tickets: their lines, costs, tenants and reported usage

// TestQueue_ClaimRaceFleet races a fleet as the dispatcher runs one (issue 25): 32 replicas, each with
// its own pool and owner, over 10,000 line keys whose limits bind in every dimension, and tenants' caps.
// Each claims with its own Owner, takes what the others admitted for it, and completes in batches with
// usage unlike the estimates (refunds and debts). A sampler checks the in-flight figures as claims
// commit; afterwards every ticket was admitted, started and completed once, nothing is in flight, the
// usage history adds up, and the replay of the instants proves every cap and rate held throughout.
func TestQueue_ClaimRaceFleet(t *testing.T) {
	t.Parallel()
	// A fleet of pools: one such test at a time on the shared database.
	testdb.Heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // an outer bound only
	defer cancel()
	const racers, keys, tenants = 32, 10_000, 500
	tickets := 40_000
	if testing.Short() {
		tickets = 20_000
	}
	began := time.Now()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	byKey := fleetLimits(t, ctx, q, keys, tenants)
	runCtx, stop := context.WithCancel(ctx) // stopped when every ticket completed, or at the first failure
	defer stop()
	f := &fleet{recs: enqueueFleet(t, ctx, q, tickets, keys, tenants, racers), notifier: q.NewNotifier(nil),
		stop: stop, claimed: make(chan struct{}, 1)}
	enqueued, samples := time.Since(began), 0
	var wg sync.WaitGroup
	wg.Go(func() { _ = f.notifier.Run(runCtx) }) // one listener for all: the connection budget
	<-f.notifier.Listening()
	for r := range racers {
		cfg := testdb.PoolConfig(t)
		cfg.MaxConns = int32(1 + r%2) // replicas of one or two connections: 48 in all
		rq, err := store.New(testdb.PoolWith(t, cfg), store.Options{Schema: schema})
		require.NoError(t, err)
		racer := &fleetRacer{f: f, q: rq, owner: fmt.Sprintf("r%02d", r), run: make(chan []store.Ticket, 64)}
		wg.Go(func() { racer.claimLoop(runCtx) })
		wg.Go(func() { racer.runLoop(runCtx) })
	}
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case <-f.claimed: // claims committed: check a snapshot of the in-flight figures
			problems, err := sampleInflight(ctx, pool, schema, byKey)
			f.check(ctx, err, "sampler")
			for _, p := range problems {
				f.fail("%s", p)
			}
			samples++
		}
	}
	wg.Wait()
	require.Empty(t, f.failures)
	require.NoError(t, ctx.Err(), "%d of %d tickets completed by the outer deadline", f.completed.Load(), tickets)
	t.Logf("%d tickets: enqueued in %s, run in %s; %d claims, %d takes (%d tickets), %d completions (%d tickets), %d samples",
		tickets, enqueued.Round(time.Millisecond), (time.Since(began) - enqueued).Round(time.Millisecond), f.claims.Load(),
		f.takes.Load(), f.taken.Load(), f.completeCalls.Load(), f.completed.Load(), samples)
	requireFleetSettled(t, ctx, q, pool, schema, f)
	requireFleetReplay(t, ctx, pool, schema, f, byKey)
}

// fleetLimits are the line keys' limits, of ten classes by index, each binding in its own dimension
// or in all of them, and the tenants' caps of one ticket, upserted, and returns them by key. The
// bursts hold the largest ticket (400 tokens, 150 of output), so that none is admitted into debt.
func fleetLimits(t *testing.T, ctx context.Context, q *store.Queue, keys, tenants int) map[string]throttle.Limit {
	t.Helper()
	classes := [10]throttle.Limit{
		{MaxConcurrent: 1}, {MaxConcurrent: 1}, {MaxConcurrent: 2}, {MaxConcurrent: 3},
		{RequestsPerSecond: 20, Burst: 2},
		{TokensPerMinute: 180_000, TokenBurst: 600},
		{InputTokensPerMinute: 120_000, InputTokenBurst: 500, OutputTokensPerMinute: 30_000, OutputTokenBurst: 200},
		{MaxConcurrent: 3, MaxInflightTokens: 500},
		{MaxConcurrent: 2, MaxInflightTokens: 600, RequestsPerSecond: 10, Burst: 1, TokensPerMinute: 120_000, TokenBurst: 500,
			InputTokensPerMinute: 90_000, InputTokenBurst: 450, OutputTokensPerMinute: 30_000, OutputTokenBurst: 160},
		{MaxConcurrent: 1000},
	}
	out := make([]throttle.Limit, 0, keys+tenants)
	for i := range keys {
		l := classes[i%len(classes)]
		l.Key = fmt.Sprintf("k%05d", i)
		out = append(out, l)
	}
	for i := range tenants {
		out = append(out, throttle.Limit{Key: fmt.Sprintf("tenant:%d", i), MaxConcurrent: 1})
	}
	require.NoError(t, q.UpsertLimits(ctx, out...))
	byKey := make(map[string]throttle.Limit, len(out))
	for _, l := range out {
		byKey[l.Key] = l.WithDefaults()
	}
	return byKey
}

// fleetTicket is a ticket's usage to report; how often it was admitted, started and completed; and,
// recorded once, the claim that admitted it, when that claim began, and when its completion returned.
type fleetTicket struct {
	actual, actualOutput         int64
	admitted, started, completed atomic.Int32
	claim                        int64
	claimStart, returned         time.Time
}

// enqueueFleet enqueues tickets over the lines in a shuffled round (several each, and one in a hundred
// on the ten hot lines, one of each class, where fair share orders many), owned round robin by the
// racers, one in eight also drawing on a tenant's cap.
func enqueueFleet(t *testing.T, ctx context.Context, q *store.Queue, tickets, keys, tenants, racers int) map[int64]*fleetTicket {
	t.Helper()
	rng := rand.New(rand.NewPCG(fleetSeed, 1))
	perm := rng.Perm(tickets)
	ps, rs := make([]store.EnqueueParams, tickets), make([]*fleetTicket, tickets)
	for i := range ps {
		cost := 1 + rng.Int64N(400)
		out := rng.Int64N(min(cost, 150) + 1)
		line := perm[i] % keys
		if perm[i]%100 == 99 {
			line = perm[i] / 100 % 10 // a hot line
		}
		ps[i] = store.EnqueueParams{LimitKeys: []string{fmt.Sprintf("k%05d", line)}, Cost: cost, OutputCost: out,
			Owner: fmt.Sprintf("r%02d", i%racers), Priority: rng.IntN(3), FairnessKey: fmt.Sprintf("f%d", rng.IntN(5))}
		if i%8 == 0 {
			tenant := fmt.Sprintf("tenant:%d", rng.IntN(tenants))
			ps[i].LimitKeys, ps[i].FairnessKey = append(ps[i].LimitKeys, tenant), tenant
		}
		// The usage reported: mostly below the estimate in each dimension (refunds), one in eight above.
		rs[i] = &fleetTicket{actualOutput: out - rng.Int64N(out/2+1)}
		rs[i].actual = rs[i].actualOutput + cost - out - rng.Int64N((cost-out)/2+1)
		if rng.IntN(8) == 0 {
			rs[i].actualOutput = out + rng.Int64N(20)
			rs[i].actual = cost + rs[i].actualOutput - out + rng.Int64N(20)
		}
	}
	recs := make(map[int64]*fleetTicket, tickets)
	for b := 0; b < tickets; b += 1000 {
		ts, err := q.EnqueueMany(ctx, ps[b:min(b+1000, tickets)])
		require.NoError(t, err)
		for i, tk := range ts {
			recs[tk.ID] = rs[b+i]
		}
	}
	return recs
}

// fleet is what the racers share.
type fleet struct {
	recs                                           map[int64]*fleetTicket
	notifier                                       *store.Notifier
	claims, takes, taken, completeCalls, completed atomic.Int64
	stop                                           context.CancelFunc
	claimed                                        chan struct{} // a claim committed: the sampler samples
	mu                                             sync.Mutex
	failures                                       []string
}

func (f *fleet) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failures) < 20 {
		f.failures = append(f.failures, fmt.Sprintf(format, args...))
	}
	f.stop()
}

// check records err, unless ctx is done (the run is over), and reports whether there was one.
func (f *fleet) check(ctx context.Context, err error, format string, args ...any) bool {
	if err != nil && ctx.Err() == nil {
		f.fail("%s: %v", fmt.Sprintf(format, args...), err)
	}
	return err != nil
}

// fleetRacer is one replica: its own pool and owner.
type fleetRacer struct {
	f     *fleet
	q     *store.Queue
	owner string
	run   chan []store.Ticket // started tickets, for the completer
}

// claimLoop claims as the dispatcher's Claimer does: again at once after a full claim or one that
// left lines unread (More); otherwise at the earliest RetryAt, on work, on releases when its claim
// left tickets waiting for room, or at the poll. It runs its own admissions at once.
func (r *fleetRacer) claimLoop(ctx context.Context) {
	const batch, poll = 100, 250 * time.Millisecond
	waiter := r.f.notifier.ClaimWaiter()
	defer waiter.Close()
	for {
		id, began := r.f.claims.Add(1), time.Now()
		res, err := r.q.Claim(ctx, store.ClaimParams{Max: batch, Owner: r.owner})
		if r.f.check(ctx, err, "claim %d by %s", id, r.owner) {
			return
		}
		var mine []store.Ticket
		for _, tk := range res.Admitted {
			rec := r.f.recs[tk.ID]
			switch {
			case rec == nil || rec.admitted.Add(1) != 1:
				r.f.fail("claim %d by %s admitted ticket %d, unknown or admitted before", id, r.owner, tk.ID)
				continue
			case tk.Owner == r.owner && tk.State == store.TicketStateRunning && rec.started.Add(1) == 1:
				mine = append(mine, tk) // runs at once
			case tk.Owner == r.owner || tk.State != store.TicketStateAdmitted:
				r.f.fail("claim %d by %s returned ticket %d of %s %s", id, r.owner, tk.ID, tk.Owner, tk.State)
			}
			rec.claim, rec.claimStart = id, began
		}
		select {
		case r.f.claimed <- struct{}{}:
		default:
		}
		if len(mine) > 0 {
			select {
			case r.run <- mine:
			case <-ctx.Done():
				return
			}
		}
		next := poll
		switch {
		case len(res.Admitted) == batch || res.More:
			next = 0
		case !res.RetryAt.IsZero():
			next = min(next, max(0, res.RetryAt.Sub(res.Now)))
		}
		if next > 0 && !waiter.Wait(ctx, res.WaitsOnRelease, next) {
			return
		}
	}
}

// runLoop is the replica's runner and completer: when notified of admissions for its owner, or at
// the poll, it takes them (TakeAdmitted), and it completes what it took with what its own claims
// started, in batches (CompleteMany, as the dispatcher's Completer), each run reporting its usage.
func (r *fleetRacer) runLoop(ctx context.Context) {
	admitted, unsubscribe := r.f.notifier.Subscribe(store.TopicAdmitted(r.owner))
	defer unsubscribe()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for full := false; ; {
		var ts []store.Ticket
		if !full {
			select {
			case <-ctx.Done():
				return
			case ts = <-r.run:
			case <-admitted:
			case <-poll.C:
			}
		}
		taken, err := r.q.TakeAdmitted(ctx, r.owner, 100)
		if r.f.check(ctx, err, "take by %s", r.owner) {
			return
		}
		r.f.takes.Add(1)
		r.f.taken.Add(int64(len(taken)))
		full = len(taken) == 100
		for _, tk := range taken {
			if rec := r.f.recs[tk.ID]; rec == nil || rec.started.Add(1) != 1 || tk.Owner != r.owner || tk.State != store.TicketStateRunning {
				r.f.fail("take by %s returned ticket %d of %s %s, unknown or started before", r.owner, tk.ID, tk.Owner, tk.State)
			}
		}
		for ts = append(ts, taken...); len(ts) < 500 && len(r.run) > 0; {
			ts = append(ts, <-r.run...)
		}
		if len(ts) == 0 {
			continue
		}
		ps := make([]store.CompleteParams, len(ts))
		for i, tk := range ts {
			rec := r.f.recs[tk.ID]
			ps[i] = store.CompleteParams{TicketID: tk.ID, ActualCost: rec.actual, ActualOutput: rec.actualOutput,
				OutcomeKind: store.OutcomeCompleted}
		}
		found, err := r.q.CompleteMany(ctx, ps)
		if r.f.check(ctx, err, "complete %d runs by %s", len(ps), r.owner) {
			return
		}
		returned := time.Now() // after the commit
		r.f.completeCalls.Add(1)
		for i, tk := range ts {
			if rec := r.f.recs[tk.ID]; !found[i] || rec.completed.Add(1) != 1 {
				r.f.fail("%s completed ticket %d: found %t, or completed before", r.owner, tk.ID, found[i])
			} else {
				rec.returned = returned
			}
		}
		if r.f.completed.Add(int64(len(ts))) == int64(len(r.f.recs)) {
			r.f.stop()
		}
	}
}

// requireFleetSettled checks that every ticket was admitted, started and completed once and is
// finished; Verify (with none in flight: every limit's in-flight figures, net of the ledger, are zero);
// the usage history; and that every dimension made tickets wait.
func requireFleetSettled(t *testing.T, ctx context.Context, q *store.Queue, pool *pgxpool.Pool, schema string, f *fleet) {
	t.Helper()
	for id, rec := range f.recs {
		require.Equal(t, [3]int32{1, 1, 1}, [3]int32{rec.admitted.Load(), rec.started.Load(), rec.completed.Load()},
			"ticket %d admitted, started and completed", id)
	}
	var finished int
	var reasons []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'finished'),
		array_agg(DISTINCT wait_reason) FILTER (WHERE wait_reason IS NOT NULL) FROM `+schema+`.sluice_ticket`).Scan(&finished, &reasons))
	require.Equal(t, len(f.recs), finished, "every ticket finished, and no other")
	requireHealthy(t, q)
	requireUsageAddsUp(t, ctx, pool, schema)
	require.Subset(t, reasons, []string{"concurrency", "inflight_tokens", "rate", "tokens", "input_tokens", "output_tokens"},
		"every dimension made tickets wait")
}

// requireFleetReplay replays every key's admissions (requireInflightHeld, requireRatesHeld) with the
// claims and completions the racers recorded, and logs how many keys reached their caps.
func requireFleetReplay(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, f *fleet, byKey map[string]throttle.Limit) {
	t.Helper()
	per := readAdmissions(t, ctx, pool, schema)
	atCap := map[bool]int{} // keys at MaxConcurrent, by whether they are tenants'
	for key, ivs := range per {
		for _, a := range ivs {
			a.claim, a.claimStart, a.returned = f.recs[a.id].claim, f.recs[a.id].claimStart, f.recs[a.id].returned
		}
		l := byKey[key]
		if n, _ := requireInflightHeld(t, key, l, ivs); n == l.MaxConcurrent {
			atCap[strings.HasPrefix(key, "tenant:")]++
		}
		requireRatesHeld(t, key, l, ivs)
	}
	t.Logf("%d keys replayed; at MaxConcurrent: %d lines, %d tenants", len(per), atCap[false], atCap[true])
}
