package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// TestQueue_ClaimRaceAllowances races 16 claimers, each on its own pool and each a replica that owns a
// sixteenth of the tickets (it runs its own at once and takes what the others admitted for it), over
// tickets drawing on limits with allowances: a free plan that refuses when spent, a pro plan that
// waits (tokens and money), a provider with an hourly request allowance, a batch line with a rolling
// output-token one, and a cap of one request a day for each of the pro plan's tenants (hundreds of
// keys, locked as the claims reach them). The clock is injected
// and frozen while claims run (the claimers hold a read lock; the clock moves under the write lock),
// so that every claim decides at an instant no earlier than any claim committed before it, as the
// database's clock read under the row locks would; it starts three minutes before midnight in Los
// Angeles and moves two seconds at a time, so the plans' day ends while tickets wait for it.
//
// Usage is reported at or below each reservation (refunds only), so each window's admissions are
// bounded by the allowance in real usage: afterwards the tickets are replayed to check that no
// calendar window's usage, nor any rolling window's, went above its amount, and that the state kept
// for each allowance equals the usage of the tickets admitted in its window (reservations reconciled).
func TestQueue_ClaimRaceAllowances(t *testing.T) {
	t.Parallel()
	// A fleet of pools: one such test at a time on the shared database.
	testdb.Heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // an outer bound only
	defer cancel()
	const claimers = 16
	nTickets := 900
	if testing.Short() {
		nTickets = 400
	}
	parse := func(s string, refuse bool) throttle.Allowance {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err)
		if refuse {
			a.OnSpent = throttle.OnSpentRefuse
		}
		return a
	}
	limits := []throttle.Limit{
		{Key: "llm", MaxConcurrent: 40, Allowances: throttle.Allowances{parse("requests=2000/hour", false)}},
		{Key: "batch", Allowances: throttle.Allowances{parse("output_tokens=8000/5m", false)}},
		{Key: "plan:free", Allowances: throttle.Allowances{parse("tokens=20000/day@America/Los_Angeles", true)}},
		{Key: "plan:pro", Allowances: throttle.Allowances{parse("tokens=50000/day@America/Los_Angeles", false),
			parse("usd=0.25/day@America/Los_Angeles", false)}},
	}
	// A tenant's cap of one request a day (waiting when spent) for every two of pro's tickets: the
	// first is admitted before midnight, the second after it, unless its deadline comes first.
	for n := range nTickets / 2 {
		limits = append(limits, throttle.Limit{Key: fmt.Sprintf("tenant:%03d", n),
			Allowances: throttle.Allowances{parse("requests=1/day@America/Los_Angeles", false)}})
	}
	byKey := map[string]throttle.Limit{}
	for _, l := range limits {
		byKey[l.Key] = l
	}
	clock := &fakeClock{t: time.Date(2026, 1, 15, 7, 57, 0, 0, time.UTC)} // 23:57 in Los Angeles
	midnight := time.Date(2026, 1, 15, 8, 0, 0, 0, time.UTC)
	var frozen sync.RWMutex // claims hold it to read; the clock moves under the write lock
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema, Now: clock.Now})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, limits...))

	rng := rand.New(rand.NewPCG(28, 12))
	pro := 0
	for i := range nTickets {
		p := store.EnqueueParams{LimitKeys: []string{"llm", "plan:pro"}, Owner: fmt.Sprintf("w%d", i%claimers)}
		switch rng.IntN(5) {
		case 0:
			p.LimitKeys[1] = "plan:free"
		case 1:
			p.LimitKeys = []string{"batch"}
		default:
			p.LimitKeys = append(p.LimitKeys, fmt.Sprintf("tenant:%03d", pro/2))
			pro++
		}
		p.Cost = int64(100 + rng.IntN(300))
		p.OutputCost = rng.Int64N(p.Cost + 1)
		p.CostMoney = int64(500 + rng.IntN(1500))
		if rng.IntN(10) == 0 && p.LimitKeys[0] == "llm" { // Temporal would time these out before midnight: refused rather than left waiting
			p.Deadline = midnight.Add(-time.Second)
		}
		_, err := q.Enqueue(ctx, p)
		require.NoError(t, err)
	}

	var (
		finished, claims atomic.Int64
		violations       []string
		vmu              sync.Mutex
		wg               sync.WaitGroup
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	violate := func(format string, args ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		violations = append(violations, fmt.Sprintf(format, args...))
		stop()
	}
	ticked := make(chan struct{}, 1)
	wg.Go(func() { // the clock: two seconds on after each round of claims
		for runCtx.Err() == nil {
			for claims.Load() < claimers && runCtx.Err() == nil {
				select {
				case <-ticked:
				case <-runCtx.Done():
				}
			}
			frozen.Lock()
			clock.Add(2 * time.Second)
			claims.Store(0)
			frozen.Unlock()
		}
	})
	for c := range claimers {
		cfg := testdb.PoolConfig(t)
		cfg.MaxConns = 1 // a racer claims and completes in turn: 16 connections in all, beside the suite's other tests
		cq, err := store.New(testdb.PoolWith(t, cfg), store.Options{Schema: schema, Now: clock.Now})
		require.NoError(t, err)
		owner := fmt.Sprintf("w%d", c)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 28))
			for runCtx.Err() == nil {
				// Each racer is a replica: its claim admits for every owner, and runs its own at once;
				// it takes what the others admitted for it.
				frozen.RLock()
				res, err := cq.Claim(ctx, store.ClaimParams{Max: 8, MaxLines: 2, Owner: owner})
				frozen.RUnlock()
				if err != nil {
					violate("claim: %v", err)
					return
				}
				claims.Add(1)
				select {
				case ticked <- struct{}{}:
				default:
				}
				taken, err := cq.TakeAdmitted(ctx, owner, 64)
				if err != nil {
					violate("take: %v", err)
					return
				}
				mine := taken
				for _, tk := range res.Admitted {
					if tk.Owner == owner {
						mine = append(mine, tk)
					}
				}
				for _, tk := range mine {
					// Usage at or below the reservation in every meter: refunds only.
					out := rng.Int64N(tk.OutputCost + 1)
					actual := out + rng.Int64N(tk.Cost-tk.OutputCost+1)
					err := cq.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: actual, ActualOutput: out,
						ActualMoney: 1 + rng.Int64N(tk.CostMoney)})
					if err != nil {
						violate("complete %d: %v", tk.ID, err)
						return
					}
				}
				if finished.Add(int64(len(mine)+len(res.Refused)+len(res.Expired))) >= int64(nTickets) {
					stop()
				}
			}
		})
	}
	<-runCtx.Done()
	wg.Wait()
	require.Empty(t, violations)
	require.Equal(t, int64(nTickets), finished.Load())
	// One more claim folds what the last completions appended to the ledgers.
	_, err = q.Claim(ctx, store.ClaimParams{})
	require.NoError(t, err)
	requireHealthy(t, q)

	tickets := readAllowanceTickets(t, ctx, pool, schema)
	requireAllowancesHeld(t, byKey, tickets)
	requireAllowancesReconciled(t, ctx, q, byKey, tickets, clock.Now())
	requireRefusalsJustified(t, tickets)

	var before, after, refusedFree, refusedDeadline int
	for _, tk := range tickets {
		switch {
		case tk.refusal != nil && tk.deadline.IsZero():
			refusedFree++
		case tk.refusal != nil:
			refusedDeadline++
		case !contains(tk.keys, "plan:pro"):
		case tk.admitted.Before(midnight):
			before++
		default:
			after++
		}
	}
	t.Logf("%d tickets, ended at %s: pro admitted %d before midnight in Los Angeles and %d after; %d refused for a spent allowance, %d for a deadline before the reset",
		len(tickets), clock.Now().Format(time.RFC3339), before, after, refusedFree, refusedDeadline)
	require.Positive(t, before)
	require.Positive(t, after, "the pro plan's waiting tickets were admitted once its day reset")
	require.Positive(t, refusedFree)
	require.Positive(t, refusedDeadline)
}

// allowanceTicket is a ticket of TestQueue_ClaimRaceAllowances as the database recorded it.
type allowanceTicket struct {
	id                 int64
	keys               []string
	admitted, deadline time.Time
	reserved, actual   throttle.Spend
	refusal            *throttle.Refusal
}
