package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// BenchmarkQueue_Claim measures one claim of a batch of 10 from a line of 1k and of 100k queued tickets
// (with fair-share tags over 100 tenants), on the same limit. The claim is an index scan of the line's
// head, so the two should cost the same. Between iterations (untimed) the batch is put back.
func BenchmarkQueue_Claim(b *testing.B) {
	ctx := context.Background()
	for _, queued := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			pool := testdb.Pool(b)
			schema := testdb.Schema(b, pool)
			q, err := store.New(pool, store.Options{Schema: schema})
			require.NoError(b, err)
			require.NoError(b, q.UpsertLimits(ctx,
				throttle.Limit{Key: "openai", MaxConcurrent: 1_000_000, RequestsPerSecond: 1e9, TokensPerMinute: 1e12},
				throttle.Limit{Key: "other", MaxConcurrent: 10}))
			// Bulk load through SQL: the shape Enqueue writes, a hundred times faster to set up.
			_, err = pool.Exec(ctx, `INSERT INTO `+schema+`.sluice_ticket
				(state, line_key, limit_keys, cost, priority, fairness_key, vstart, seq, owner)
				SELECT 'queued', 'openai', ARRAY['openai'], 100 + g % 900, g % 3, 'tenant-' || (g % 100), (g / 100)::float8, g, 'w'
				FROM generate_series(1, $1) g`, queued)
			require.NoError(b, err)
			_, err = pool.Exec(ctx, `ANALYZE `+schema+`.sluice_ticket`)
			require.NoError(b, err)
			b.ResetTimer()
			for b.Loop() {
				res, err := q.Claim(ctx, store.ClaimParams{Max: 10})
				if err != nil || len(res.Admitted) != 10 {
					b.Fatalf("claim: %v, %d admitted", err, len(res.Admitted))
				}
				b.StopTimer()
				_, err = pool.Exec(ctx, `WITH r AS (UPDATE `+schema+`.sluice_ticket SET state = 'queued', admitted_at = NULL
					WHERE state = 'admitted' RETURNING 1)
					UPDATE `+schema+`.sluice_limit SET inflight_count = 0, inflight_tokens = 0`)
				require.NoError(b, err)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkQueue_ClaimComplete measures claim + complete per ticket, through one claimer taking
// batches of 100 from one key with a limit that does not bind: each ticket completed in its own
// transaction (Complete, as before batching) beside each claimed batch completed in one
// (CompleteMany, as the dispatcher's completer does). It reports tickets per second.
func BenchmarkQueue_ClaimComplete(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"per-ticket", "batched"} {
		b.Run(mode, func(b *testing.B) {
			pool := testdb.Pool(b)
			schema := testdb.Schema(b, pool)
			q, err := store.New(pool, store.Options{Schema: schema})
			require.NoError(b, err)
			require.NoError(b, q.UpsertLimits(ctx, throttle.Limit{Key: "k", MaxConcurrent: 1_000_000, TokensPerMinute: 1e12}))
			const batch = 100
			tickets := 0
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				_, err := pool.Exec(ctx, `INSERT INTO `+schema+`.sluice_ticket
					(state, line_key, limit_keys, cost, priority, fairness_key, vstart, seq, owner)
					SELECT 'queued', 'k', ARRAY['k'], 100, 3, '', 0, g, 'w' FROM generate_series(1, $1) g`, batch)
				require.NoError(b, err)
				b.StartTimer()
				res, err := q.Claim(ctx, store.ClaimParams{Max: batch})
				if err != nil || len(res.Admitted) != batch {
					b.Fatalf("claim: %v, %d admitted", err, len(res.Admitted))
				}
				ps := make([]store.CompleteParams, batch)
				for i, t := range res.Admitted {
					ps[i] = store.CompleteParams{TicketID: t.ID, ActualCost: 90, OutcomeKind: store.OutcomeCompleted}
				}
				if mode == "batched" {
					_, err = q.CompleteMany(ctx, ps)
					require.NoError(b, err)
				} else {
					for _, p := range ps {
						require.NoError(b, q.Complete(ctx, p))
					}
				}
				tickets += batch
			}
			b.ReportMetric(float64(tickets)/b.Elapsed().Seconds(), "tickets/s")
		})
	}
}

// BenchmarkQueue_Enqueue measures the enqueue of one ticket (Enqueue) on one limit and on a line and a
// tenant's limit, a batch of 100 (EnqueueMany), and one ticket from 8 goroutines at once on the same
// limit (where the row locks enqueues take on the limit rows they name are shared). It reports the WAL
// written per ticket (pg_current_wal_lsn before and after: the whole server's, so run it alone on
// its server for that figure). Between iterations nothing is reset: the line grows, as under load.
func BenchmarkQueue_Enqueue(b *testing.B) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		keys     []string
		batch    int
		parallel bool
		claim    bool // EnqueueClaiming, as the dispatcher's enqueuer: past the first 10, a backlog
	}{
		{"one-key", []string{"openai"}, 1, false, false},
		{"line-and-tenant", []string{"openai", "tenant:acme"}, 1, false, false},
		{"batch=100", []string{"openai", "tenant:acme"}, 100, false, false},
		{"parallel=8", []string{"openai", "tenant:acme"}, 1, true, false},
		{"claiming/one-key", []string{"openai"}, 1, false, true},
		{"claiming/line-and-tenant", []string{"openai", "tenant:acme"}, 1, false, true},
		{"claiming/batch=100", []string{"openai", "tenant:acme"}, 100, false, true},
		{"claiming/parallel=8", []string{"openai", "tenant:acme"}, 1, true, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			pool := testdb.Pool(b)
			schema := testdb.Schema(b, pool)
			q, err := store.New(pool, store.Options{Schema: schema})
			require.NoError(b, err)
			require.NoError(b, q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 10},
				throttle.Limit{Key: "tenant:acme", MaxConcurrent: 5}))
			ps := make([]store.EnqueueParams, c.batch)
			for i := range ps {
				ps[i] = store.EnqueueParams{LimitKeys: c.keys, Cost: 100, Owner: "w", FairnessKey: "acme",
					Namespace: "default", WorkflowID: "wf", ActivityType: "Call"}
			}
			lsn := func() (n int64) {
				require.NoError(b, pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n))
				return n
			}
			var tickets atomic.Int64
			enqueue := func() error {
				if !c.claim {
					_, err := q.EnqueueMany(ctx, ps)
					return err
				}
				_, errs, _, err := q.EnqueueClaiming(ctx, ps, store.ClaimParams{Max: len(ps), Owner: "w"})
				return errors.Join(append(errs, err)...)
			}
			from := lsn()
			b.ResetTimer()
			if c.parallel {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := enqueue(); err != nil {
							b.Error(err)
							return
						}
						tickets.Add(int64(len(ps)))
					}
				})
			} else {
				for b.Loop() {
					if err := enqueue(); err != nil {
						b.Fatal(err)
					}
					tickets.Add(int64(len(ps)))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(lsn()-from)/float64(tickets.Load()), "wal-B/ticket")
			b.ReportMetric(float64(tickets.Load())/b.Elapsed().Seconds(), "tickets/s")
		})
	}
}
