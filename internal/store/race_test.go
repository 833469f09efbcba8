package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
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

// TestQueue_ClaimRace races claimers, each on its own pool (its own connections, as separate replicas
// would be), over thousands of tickets on shared limits, with the database's clock. A sampler checks
// the in-flight figures from the database while they run; afterwards the tickets' own admission and
// release instants (read by each transaction after its locks) are replayed to prove that no limit was
// exceeded at any instant and that no rate was exceeded over any window.
func TestQueue_ClaimRace(t *testing.T) {
	t.Parallel()
	// A fleet of pools: one such test at a time on the shared database.
	testdb.Heavy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // an outer bound only
	defer cancel()

	const claimers = 8
	nTickets := 2000
	if testing.Short() {
		nTickets = 800
	}
	limits := []throttle.Limit{
		{Key: "shared", MaxConcurrent: 6, MaxInflightTokens: 2500},
		{Key: "rps", RequestsPerSecond: 400, Burst: 20},
		{Key: "tpm", TokensPerMinute: 6_000_000, TokenBurst: 5000}, // 100k tokens/s
		// Input and output metered apart, as Anthropic does: 60k input and 20k output tokens/s.
		{Key: "itpm-otpm", InputTokensPerMinute: 3_600_000, InputTokenBurst: 3000, OutputTokensPerMinute: 1_200_000, OutputTokenBurst: 1500},
		{Key: "tenant:0", MaxConcurrent: 2},
		{Key: "tenant:1", MaxConcurrent: 2},
		{Key: "tenant:2", MaxConcurrent: 1},
	}
	byKey := map[string]throttle.Limit{}
	for _, l := range limits {
		byKey[l.Key] = l.WithDefaults()
	}
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, limits...))

	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][]string{{"shared"}, {"shared", "tenant:0"}, {"shared", "tenant:1"}, {"tenant:2", "shared"}, {"rps"}, {"tpm"}, {"rps", "tpm"}, {"itpm-otpm"}, {"itpm-otpm", "tpm"}}
	ticket := func(rng *rand.Rand, owner string) store.EnqueueParams {
		keys := shapes[rng.IntN(len(shapes))]
		cost := int64(1 + rng.IntN(800))
		return store.EnqueueParams{
			LimitKeys: keys, Cost: cost, OutputCost: rng.Int64N(cost + 1), Owner: owner,
			Priority: rng.IntN(3), FairnessKey: fmt.Sprintf("f%d", rng.IntN(4)),
		}
	}
	// Half the tickets are written first; the rest by enqueuers racing the claimers, each enqueue
	// claiming its lines in its own transaction (EnqueueClaiming, as the dispatcher's enqueuer does).
	const enqueuers = 2
	upfront := nTickets / 2
	for i := range upfront {
		_, err := q.Enqueue(ctx, ticket(rng, fmt.Sprintf("w%d", i%claimers)))
		require.NoError(t, err)
	}

	var (
		done       atomic.Int64
		violations []string
		vmu        sync.Mutex
		samples    atomic.Int64
	)
	runCtx, stop := context.WithCancel(ctx) // stopped once every ticket completed, or at the first violation
	defer stop()
	violate := func(format string, args ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
		stop()
	}

	// The sampler: one consistent snapshot per statement, from the tickets themselves.
	var wg sync.WaitGroup
	wg.Go(func() {
		for runCtx.Err() == nil {
			problems, err := sampleInflight(ctx, pool, schema, byKey)
			if err != nil {
				violate("sampler: %v", err)
				return
			}
			for _, p := range problems {
				violate("%s", p)
			}
			samples.Add(1)
		}
	})
	// The claimers wait between claims as the dispatcher's do: for work or releases, or until a
	// blocked line's retry instant.
	notifier := q.NewNotifier(nil)
	wg.Go(func() { _ = notifier.Run(runCtx) })
	select {
	case <-notifier.Listening():
	case <-ctx.Done():
		t.Fatal("the notifier never listened")
	}

	// replica is a queue on a pool of its own (its own connections, as a separate replica's).
	replica := func(maxConns int32) *store.Queue {
		cfg := testdb.PoolConfig(t)
		cfg.MaxConns = maxConns
		rq, err := store.New(testdb.PoolWith(t, cfg), store.Options{Schema: schema})
		require.NoError(t, err)
		return rq
	}
	// complete completes r through rq in a goroutine of running's, racing the claims; the last
	// completion ends the run.
	complete := func(rq *store.Queue, running *sync.WaitGroup, r raceRun) {
		running.Go(func() {
			if err := rq.Complete(ctx, store.CompleteParams{TicketID: r.id, ActualCost: r.actual, ActualOutput: r.output}); err != nil {
				violate("complete %d: %v", r.id, err)
			}
			if done.Add(1) == int64(nTickets) {
				stop()
			}
		})
	}
	for c := range claimers {
		cq := replica(3)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			waiter := notifier.ClaimWaiter()
			defer waiter.Close()
			var running sync.WaitGroup
			defer running.Wait()
			var working []raceRun
			for runCtx.Err() == nil {
				res, err := cq.Claim(ctx, store.ClaimParams{Max: 16, MaxLines: 3})
				if err != nil {
					violate("claim: %v", err)
					return
				}
				// The claimer's claims are the clock of its runs' work: each run works through 0 to 2
				// more of them, then completes in a goroutine of its own, racing the next claims of
				// every claimer.
				kept := working[:0]
				for _, r := range working {
					if r.claims == 0 {
						complete(cq, &running, r)
						continue
					}
					r.claims--
					kept = append(kept, r)
				}
				working = kept
				for _, tk := range res.Admitted {
					// Real usage at or above the estimate, in each dimension: debt only, so admitted
					// estimates bound the rates.
					extra := int64(rng.IntN(int(tk.Cost/2) + 1))
					working = append(working, raceRun{id: tk.ID, claims: rng.IntN(3), actual: tk.Cost + extra,
						output: tk.OutputCost + rng.Int64N(extra+1)})
				}
				if len(res.Admitted) > 0 {
					continue
				}
				// Nothing admitted: the runs end (what they hold may be what the lines wait for), and
				// the claimer waits as the dispatcher's does.
				for _, r := range working {
					complete(cq, &running, r)
				}
				working = working[:0]
				next := 50 * time.Millisecond // the dispatcher's poll, should a notification be lost
				if !res.RetryAt.IsZero() {
					next = min(next, max(0, res.RetryAt.Sub(res.Now)))
				}
				if next > 0 && !waiter.Wait(runCtx, res.WaitsOnRelease, next) {
					return
				}
			}
		})
	}
	var direct atomic.Int64 // tickets their own enqueue admitted
	for e := range enqueuers {
		eq := replica(2)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(e), 11))
			owner := fmt.Sprintf("e%d", e)
			var running sync.WaitGroup
			defer running.Wait()
			for left := (nTickets - upfront) / enqueuers; left > 0 && runCtx.Err() == nil; {
				ps := make([]store.EnqueueParams, min(left, 1+rng.IntN(3)))
				for i := range ps {
					ps[i] = ticket(rng, owner)
				}
				left -= len(ps)
				_, errs, res, err := eq.EnqueueClaiming(ctx, ps, store.ClaimParams{Max: len(ps), Owner: owner})
				if err == nil {
					err = errors.Join(errs...)
				}
				if err != nil {
					violate("enqueue claiming: %v", err)
					return
				}
				for _, tk := range res.Admitted {
					if tk.Owner == owner {
						direct.Add(1)
					}
					complete(eq, &running, raceRun{id: tk.ID, actual: tk.Cost, output: tk.OutputCost})
				}
			}
		})
	}
	<-runCtx.Done()
	wg.Wait()
	require.Empty(t, violations)
	require.Equal(t, int64(nTickets), done.Load())
	requireHealthy(t, q)
	requireUsageAddsUp(t, ctx, pool, schema)
	t.Logf("%d tickets, %d claimers, %d enqueuers (%d tickets admitted by their own enqueue), %d samples of the in-flight figures",
		nTickets, claimers, enqueuers, direct.Load(), samples.Load())

	// Replay the tickets' instants per key.
	for key, ivs := range readAdmissions(t, ctx, pool, schema) {
		maxN, maxTok := requireInflightHeld(t, key, byKey[key], ivs)
		t.Logf("key %q: %d tickets, peak %d in flight, peak %d tokens in flight", key, len(ivs), maxN, maxTok)
		requireRatesHeld(t, key, byKey[key], ivs)
	}
}

// raceRun is a run of TestQueue_ClaimRace: the ticket, the claims of its claimer it works through
// yet, and the usage its completion reports.
type raceRun struct {
	id, actual, output int64
	claims             int
}

// sampleInflight reads one snapshot of the tickets in flight (one statement: one consistent view, from
// the tickets themselves) and returns the keys' caps it finds exceeded.
func sampleInflight(ctx context.Context, pool *pgxpool.Pool, schema string, byKey map[string]throttle.Limit) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT k, count(*), sum(cost) FROM `+schema+`.sluice_ticket, unnest(limit_keys) k
		WHERE state IN ('admitted', 'running') GROUP BY k`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var k string
		var n, tok int64
		if err := rows.Scan(&k, &n, &tok); err != nil {
			return problems, err
		}
		l := byKey[k]
		if l.MaxConcurrent > 0 && n > int64(l.MaxConcurrent) {
			problems = append(problems, fmt.Sprintf("sampled %d in flight on %q, MaxConcurrent %d", n, k, l.MaxConcurrent))
		}
		if l.MaxInflightTokens > 0 && n > 1 && tok > l.MaxInflightTokens {
			problems = append(problems, fmt.Sprintf("sampled %d tokens in flight on %q, MaxInflightTokens %d", tok, k, l.MaxInflightTokens))
		}
	}
	return problems, rows.Err()
}

// requireUsageAddsUp checks every key's usage history against its tickets, all finished: a request
// per admission, and tokens (in all, of input, of output) as reserved less each refund, whether a claim
// folded it in or it waits in the release ledger still: as used, or as reserved where none was reported.
func requireUsageAddsUp(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) {
	t.Helper()
	var wrong []string
	require.NoError(t, pool.QueryRow(ctx, strings.ReplaceAll(`WITH t AS (
			SELECT k, count(*) AS n, sum(coalesce(actual_cost, cost)) AS tok, sum(coalesce(actual_output, output_cost)) AS out
			FROM {s}.sluice_ticket, unnest(limit_keys) k GROUP BY k
		), u AS (
			SELECT key, sum(requests) AS n, sum(tokens) AS tok, sum(input_tokens) AS inp, sum(output_tokens) AS out
			FROM {s}.sluice_usage GROUP BY key
		), r AS (SELECT key, sum(refund) AS tok, sum(refund_output) AS out FROM {s}.sluice_release GROUP BY key)
		SELECT array_agg(t.k) FROM t LEFT JOIN u ON u.key = t.k LEFT JOIN r ON r.key = t.k
		WHERE (t.n, t.tok, t.tok - t.out, t.out) IS DISTINCT FROM (u.n, (u.tok - coalesce(r.tok, 0))::bigint,
			(u.inp - coalesce(r.tok - r.out, 0))::bigint, (u.out - coalesce(r.out, 0))::bigint)`, "{s}", schema)).Scan(&wrong))
	require.Empty(t, wrong, "keys whose usage history does not add up to their tickets' admissions and usage")
}

// admission is one ticket's life on its limits, as the database recorded it, for the replays.
type admission struct {
	id         int64
	start, end time.Time // admitted_at and finished_at: clock reads taken under the limit rows' locks
	// cost and output are the reservation and its part of output tokens.
	cost, output int64
	// refund is what the completion gave back to the token budgets (all, input, output), at least 0:
	// a debt only makes later admissions stricter, so counting none is the lenient side.
	refund [3]int64
	// claim numbers the claim that admitted the ticket, claimStart is when its caller began it
	// (before its first statement) and returned when the ticket's completion had returned (after its
	// commit), all as the test recorded them; zero when it did not.
	claim                int64
	claimStart, returned time.Time
}

// readAdmissions reads every ticket of schema, each of which must be finished, by limit key, the
// admissions shared between the keys of a ticket.
func readAdmissions(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) map[string][]*admission {
	t.Helper()
	per := map[string][]*admission{}
	rows, err := pool.Query(ctx, `SELECT id, limit_keys, admitted_at, finished_at, cost, output_cost, coalesce(actual_cost, -1),
		coalesce(actual_output, 0), state FROM `+schema+`.sluice_ticket`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			a              admission
			keys           []string
			actual, actOut int64
			state          string
		)
		require.NoError(t, rows.Scan(&a.id, &keys, &a.start, &a.end, &a.cost, &a.output, &actual, &actOut, &state))
		require.Equal(t, "finished", state, "ticket %d", a.id)
		require.False(t, a.end.Before(a.start), "ticket %d finished before it was admitted", a.id)
		if actual >= 0 {
			a.refund = [3]int64{max(0, a.cost-actual), max(0, a.cost-a.output-(actual-actOut)), max(0, a.output-actOut)}
		}
		for _, k := range keys {
			per[k] = append(per[k], &a)
		}
	}
	require.NoError(t, rows.Err())
	return per
}

// requireInflightHeld replays key's admissions as a sweep over their starts and ends, ends first at
// equal instants (a release and an admission at one microsecond were serialised by the lock), and
// fails when more tickets, or (for more than one ticket) more tokens, were in flight at any instant
// than l allows. It returns the peaks.
func requireInflightHeld(t *testing.T, key string, l throttle.Limit, ivs []*admission) (int, int64) {
	t.Helper()
	type ev struct {
		at   time.Time
		d    int
		cost int64
	}
	evs := make([]ev, 0, 2*len(ivs))
	for _, v := range ivs {
		evs = append(evs, ev{v.start, 1, v.cost}, ev{v.end, -1, -v.cost})
	}
	sort.Slice(evs, func(i, j int) bool {
		if !evs[i].at.Equal(evs[j].at) {
			return evs[i].at.Before(evs[j].at)
		}
		return evs[i].d < evs[j].d
	})
	var n, maxN int
	var tok, maxTok int64
	for _, e := range evs {
		n += e.d
		tok += e.cost
		maxN = max(maxN, n)
		if n > 1 {
			maxTok = max(maxTok, tok)
		}
	}
	if l.MaxConcurrent > 0 {
		require.LessOrEqual(t, maxN, l.MaxConcurrent, "key %q", key)
	}
	if l.MaxInflightTokens > 0 {
		require.LessOrEqual(t, maxTok, l.MaxInflightTokens, "key %q", key)
	}
	return maxN, maxTok
}

// requireRatesHeld fails when key's admissions drew more than l's rates allow over any window between
// two admissions [t1, t2]: Burst + rate × (t2 - t1) requests, and likewise tokens of each budget, plus
// the refunds that may have come back to the bucket after the decision at t1. A refund comes back
// when the first claim to lock the key's row after the completion's commit folds it in, and the level
// is at most the burst at t1, with what the claim deciding at t1 folded. So a refund counted had not
// committed when that claim, or any earlier one on the key, locked the row: it returned after each of
// their starts, and finished by t2. That credit is sound, and as tight as the recorded instants allow.
func requireRatesHeld(t *testing.T, key string, l throttle.Limit, ivs []*admission) {
	t.Helper()
	rates := [4]float64{l.RequestsPerSecond, l.TokensPerMinute / 60, l.InputTokensPerMinute / 60, l.OutputTokensPerMinute / 60}
	bursts := [4]float64{l.Burst, l.TokenBurst, l.InputTokenBurst, l.OutputTokenBurst}
	if rates == [4]float64{} {
		return
	}
	names := [4]string{"requests", "tokens", "input tokens", "output tokens"}
	slack := [4]float64{1e-6, 1e-3, 1e-3, 1e-3} // floating point only
	byStart := slices.Clone(ivs)
	slices.SortFunc(byStart, func(a, b *admission) int { return a.start.Compare(b.start) })
	byEnd := slices.Clone(ivs)
	slices.SortFunc(byEnd, func(a, b *admission) int { return a.end.Compare(b.end) })
	for i, first := range byStart {
		before := first.claimStart // and the latest start of a claim that admitted on key before first
		for _, o := range byStart[:i] {
			if o.start.Before(first.start) && o.claimStart.After(before) {
				before = o.claimStart
			}
		}
		var credits []*admission // refunds that may have come back after first's claim began, by end
		for _, o := range byEnd {
			if o.refund != [3]int64{} && (before.IsZero() || o.returned.IsZero() || o.returned.After(before)) {
				credits = append(credits, o)
			}
		}
		var drawn, credit [4]float64
		next := 0
		for _, last := range byStart[i:] {
			for ; next < len(credits) && !credits[next].end.After(last.start); next++ {
				for d, r := range credits[next].refund {
					credit[d+1] += float64(r)
				}
			}
			w := last.start.Sub(first.start).Seconds()
			drawn[0]++
			drawn[1] += float64(last.cost)
			drawn[2] += float64(last.cost - last.output)
			drawn[3] += float64(last.output)
			for d := range drawn {
				if bound := bursts[d] + rates[d]*w + credit[d] + slack[d]; rates[d] > 0 && drawn[d] > bound {
					require.Failf(t, "rate exceeded", "key %q: %v %s admitted in %.6fs from %s (ticket %d to %d), at most %v "+
						"(%v refunded)", key, drawn[d], names[d], w, first.start.Format(time.RFC3339Nano), first.id, last.id, bound, credit[d])
				}
			}
		}
	}
}

// TestQueue_ClaimRaceOverManyLines is the fleet's shape that made claims fail: racers, each on its own
// pool and claiming its own tickets straight to running, over a thousand lines with fairness tenants.
// A claim that adopted the line of its page read ahead read it again in a later chunk (48 to 68 of
// about 280 claims failed per run, "read again after this claim admitted it"). No claim fails now,
// and every ticket is admitted exactly once.
func TestQueue_ClaimRaceOverManyLines(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an outer bound only
	defer cancel()
	const racers = 8
	lines, tickets := 1000, 20_000
	if testing.Short() {
		lines, tickets = 300, 6000
	}
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	limits := make([]throttle.Limit, lines)
	for i := range limits {
		limits[i] = throttle.Limit{Key: fmt.Sprintf("k%04d", i), MaxConcurrent: 1_000_000, TokensPerMinute: 1e12}
	}
	require.NoError(t, q.UpsertLimits(ctx, limits...))
	for b := 0; b < tickets; b += 1000 {
		ps := make([]store.EnqueueParams, 0, 1000)
		for i := b; i < min(b+1000, tickets); i++ {
			ps = append(ps, store.EnqueueParams{LimitKeys: []string{limits[i%lines].Key}, Owner: fmt.Sprintf("r%d", i%racers),
				FairnessKey: fmt.Sprintf("f%d", i%100), Cost: 10})
		}
		_, err := q.EnqueueMany(ctx, ps)
		require.NoError(t, err)
	}
	var (
		wg       sync.WaitGroup
		admitted atomic.Int64
		failures = make(chan error, racers)
	)
	for r := range racers {
		rq, err := store.New(testdb.Pool(t), store.Options{Schema: schema})
		require.NoError(t, err)
		wg.Go(func() {
			for admitted.Load() < int64(tickets) {
				res, err := rq.Claim(ctx, store.ClaimParams{Max: 100, Owner: fmt.Sprintf("r%d", r)})
				if err != nil {
					failures <- err
					return
				}
				admitted.Add(int64(len(res.Admitted)))
				if len(res.Admitted) == 0 && !res.Busy && !res.More {
					return // nothing left that this racer can reach
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		require.NoError(t, err, "a claim failed")
	}
	require.EqualValues(t, tickets, admitted.Load(), "every ticket admitted, once")
	// A racer's own tickets go straight to running; the others' it admits wait for their owner's take.
	var running, held, requests int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'),
		count(*) FILTER (WHERE state IN ('admitted', 'running')),
		(SELECT sum(requests) FROM `+schema+`.sluice_usage) FROM `+schema+`.sluice_ticket`).Scan(&running, &held, &requests))
	require.EqualValues(t, tickets, held, "every ticket admitted")
	require.Positive(t, running, "the racers' own tickets went straight to running")
	require.EqualValues(t, tickets, requests, "each admission charged once")
	requireHealthy(t, q)
}
