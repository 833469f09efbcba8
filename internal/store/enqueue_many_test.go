package store_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// randomTickets returns n tickets over lines a and b, with and without fairness keys, of varied cost,
// weight and priority.
func randomTickets(r *rand.Rand, n int) []store.EnqueueParams {
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		keys := []string{"a"}
		if r.IntN(3) == 0 {
			keys = []string{"b", "a"}
		}
		fk := []string{"", "t1", "t2", "t3"}[r.IntN(4)]
		ps[i] = store.EnqueueParams{LimitKeys: keys, Cost: int64(r.IntN(5000)), Priority: r.IntN(2),
			FairnessKey: fk, Weight: float64(1 + r.IntN(3)), Owner: "o", ActivityID: fmt.Sprint(i)}
	}
	return ps
}

// TestQueue_EnqueueManyMatchesOneByOne: a batch gives every ticket the place (priority, fair-share
// tag, order of arrival) that enqueueing the same tickets one by one gives.
func TestQueue_EnqueueManyMatchesOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := []throttle.Limit{{Key: "a", MaxConcurrent: 5}, {Key: "b", MaxConcurrent: 5}}
	one, _ := setup(t, limits...)
	many, _ := setup(t, limits...)
	r := rand.New(rand.NewPCG(1, 2))
	ps := randomTickets(r, 300)

	var want, got []store.Ticket
	for _, p := range ps {
		want = append(want, enqueue(t, one, p))
	}
	for rest := ps; len(rest) > 0; {
		n := min(len(rest), 1+r.IntN(60))
		ts, err := many.EnqueueMany(ctx, rest[:n])
		require.NoError(t, err)
		require.Len(t, ts, n)
		got, rest = append(got, ts...), rest[n:]
	}
	for i := range want {
		require.Equal(t, ps[i].ActivityID, got[i].ActivityID, "ticket %d returned in the order given", i)
		require.Equal(t, want[i].Priority, got[i].Priority, "ticket %d", i)
		require.InDelta(t, want[i].VStart, got[i].VStart, 1e-6*math.Max(1, want[i].VStart), "ticket %d's fair-share tag", i)
		require.Equal(t, store.TicketStateQueued, got[i].State)
		require.Equal(t, ps[i].LimitKeys, got[i].LimitKeys)
		if i > 0 {
			require.Greater(t, got[i].Seq, got[i-1].Seq, "ticket %d is numbered in the order given", i)
		}
	}
}

// TestQueue_EnqueueManyConcurrentBatchesShareFairTags: batches written at once on the same fairness
// keys never reuse a tag: each key's tickets tile its virtual time, every start where the previous
// ticket finished, and the key's finish tag is where the last one ends.
func TestQueue_EnqueueManyConcurrentBatchesShareFairTags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "a", MaxConcurrent: 5})
	var (
		mu  sync.Mutex
		all []store.Ticket
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range 15 {
				ps := make([]store.EnqueueParams, 1+r.IntN(12))
				for i := range ps {
					ps[i] = store.EnqueueParams{LimitKeys: []string{"a"}, Cost: int64(1 + r.IntN(100)),
						FairnessKey: []string{"t1", "t2", "t3"}[r.IntN(3)], Owner: "o"}
				}
				ts, err := q.EnqueueMany(ctx, ps)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				all = append(all, ts...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	byKey := map[string][]store.Ticket{}
	for _, tk := range all {
		byKey[tk.FairnessKey] = append(byKey[tk.FairnessKey], tk)
	}
	for fk, ts := range byKey {
		sort.Slice(ts, func(i, j int) bool { return ts[i].VStart < ts[j].VStart })
		end := 0.0
		for i, tk := range ts {
			require.InDelta(t, end, tk.VStart, 1e-6, "%s's ticket %d starts where the one before it finished", fk, i)
			end = tk.VStart + float64(tk.Cost)
		}
		var finish float64
		require.NoError(t, q.Pool().QueryRow(ctx, `SELECT finish FROM `+pgx.Identifier{q.Schema()}.Sanitize()+
			`.sluice_fair WHERE line_key = 'a' AND fairness_key = $1`, fk).Scan(&finish))
		require.InDelta(t, end, finish, 1e-6, "%s's finish tag", fk)
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestQueue_EnqueueManyBadTickets: EnqueueMany writes all or nothing and names the ticket at fault;
// EnqueueEach writes the good ones and reports each bad one's reason.
func TestQueue_EnqueueManyBadTickets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "a", MaxConcurrent: 5})
	good := store.EnqueueParams{LimitKeys: []string{"a"}, Owner: "o"}
	unknown := store.EnqueueParams{LimitKeys: []string{"a", "nope"}, Owner: "o"}
	invalid := store.EnqueueParams{LimitKeys: []string{"a"}, Owner: "o", Cost: -1}
	queued := func() int {
		var n int
		require.NoError(t, q.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{q.Schema()}.Sanitize()+`.sluice_ticket`).Scan(&n))
		return n
	}

	_, err := q.EnqueueMany(ctx, []store.EnqueueParams{good, unknown, good})
	require.ErrorIs(t, err, store.ErrUnknownLimit)
	require.ErrorContains(t, err, `ticket 1 of 3`)
	require.ErrorContains(t, err, `"nope"`)
	_, err = q.EnqueueMany(ctx, []store.EnqueueParams{good, good, invalid})
	require.ErrorContains(t, err, "ticket 2 of 3")
	require.ErrorContains(t, err, "Cost must be in [0, 1099511627776], got -1")
	_, err = q.EnqueueMany(ctx, make([]store.EnqueueParams, store.MaxEnqueueBatch+1))
	require.ErrorContains(t, err, "at most 10000 tickets, got 10001")
	_, err = q.Enqueue(ctx, unknown)
	require.ErrorIs(t, err, store.ErrUnknownLimit)
	require.NotContains(t, err.Error(), "ticket 0", "a single ticket's error is as it always was")
	require.Zero(t, queued(), "nothing written")

	ts, errs, err := q.EnqueueEach(ctx, []store.EnqueueParams{good, unknown, invalid, good})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrUnknownLimit)
	require.ErrorContains(t, errs[2], "Cost")
	require.NoError(t, errs[3])
	require.NotZero(t, ts[0].ID)
	require.NotZero(t, ts[3].ID)
	require.Equal(t, 2, queued())
	ts, errs, err = q.EnqueueEach(ctx, []store.EnqueueParams{invalid})
	require.NoError(t, err)
	require.Error(t, errs[0])
	require.Zero(t, ts[0].ID)
}

// TestQueue_EnqueueManyRetryKeepsItsPlace: a retry in a batch takes its earlier attempt's place in
// line, beside new tickets that go to the back.
func TestQueue_EnqueueManyRetryKeepsItsPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "a", MaxConcurrent: 1})
	ident := store.EnqueueParams{LimitKeys: []string{"a"}, Owner: "o", Namespace: "ns", WorkflowID: "wf",
		RunID: "r", ActivityID: "7", FairnessKey: "t1"}
	first := enqueue(t, q, ident)
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"a"}, FairnessKey: "t1", Cost: 50})
	retry := ident
	retry.Attempt = 2
	ts, err := q.EnqueueMany(ctx, []store.EnqueueParams{
		{LimitKeys: []string{"a"}, Owner: "o", FairnessKey: "t1"}, retry, {LimitKeys: []string{"a"}, Owner: "o"}})
	require.NoError(t, err)
	require.Equal(t, first.Seq, ts[1].Seq, "the retry keeps its place")
	require.Equal(t, first.VStart, ts[1].VStart)
	require.Greater(t, ts[0].Seq, first.Seq)
	require.Greater(t, ts[2].Seq, ts[0].Seq)
	_, err = q.Ticket(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the earlier attempt's ticket is consumed")
	require.Equal(t, []int64{ts[1].ID}, ids(claim(t, q, store.ClaimParams{}).Admitted))
}

// statements counts the statements a pool sends.
type statements struct {
	mu   sync.Mutex
	sent []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, d.SQL)
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestQueue_EnqueueManyIsOneStatement: a batch of 100 is one statement in one transaction.
func TestQueue_EnqueueManyIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testdb.PoolConfig(t)
	tracer := &statements{}
	cfg.ConnConfig.Tracer = tracer
	pool := testdb.PoolWith(t, cfg)
	q, err := store.New(pool, store.Options{Schema: testdb.Schema(t, pool)})
	require.NoError(t, err)
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "a", MaxConcurrent: 5}, throttle.Limit{Key: "b", MaxConcurrent: 5}))
	ps := randomTickets(rand.New(rand.NewPCG(3, 4)), 100)
	tracer.mu.Lock()
	tracer.sent = nil
	tracer.mu.Unlock()
	_, err = q.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	tracer.mu.Lock()
	defer tracer.mu.Unlock()
	require.Len(t, tracer.sent, 3, "begin, the insert, commit: %q", tracer.sent)
	require.True(t, slices.ContainsFunc(tracer.sent, func(s string) bool { return s == "commit" }))
}
