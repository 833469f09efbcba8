package store_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// fakeProvider enforces a tokens-per-minute quota the way providers do: a bucket of one minute's
// worth, refilled continuously; a request larger than what remains gets a 429 with the time until it
// would fit. Requests are charged their actual size.
type fakeProvider struct {
	perSecond float64
	bucket    throttle.Bucket
	burst     float64
}

func (p *fakeProvider) call(now time.Time, actual int64) (ok bool, retryAt time.Time) {
	p.bucket = p.bucket.Refill(now, p.perSecond, p.burst)
	if p.bucket.Level >= float64(actual) {
		p.bucket = p.bucket.Take(float64(actual))
		return true, time.Time{}
	}
	return false, p.bucket.ReadyAt(float64(actual), p.perSecond, p.burst)
}

type simResult struct {
	share  float64
	got429 int
}

// simulate runs Sluice's queue against the fake provider in virtual time (the queue's injected clock):
// a backlog of requests of varied size, an estimator off by factor, usage reported (reconcile) or
// not, 429s requeued with a pause. The share is measured after the first minute, so that the
// initial full buckets do not count.
func simulate(t *testing.T, factor float64, reconcile, headers bool) simResult {
	t.Helper()
	ctx := context.Background()
	const quota = 60_000.0 // tokens per minute
	q, b := setup(t, throttle.Limit{Key: "llm", TokensPerMinute: quota, MaxConcurrent: 50})
	p := &fakeProvider{perSecond: quota / 60, burst: quota}
	rng := rand.New(rand.NewPCG(42, 42))
	actualOf := map[int64]int64{}
	for range 400 {
		actual := int64(200 + rng.IntN(2800))
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"llm"}, Cost: int64(float64(actual) * factor)})
		actualOf[tk.ID] = actual
	}
	type running struct {
		id     int64
		doneAt time.Time
		actual int64
	}
	var inflight []running
	const (
		step    = 250 * time.Millisecond
		latency = 2 * time.Second
		warmup  = time.Minute
		total   = 4 * time.Minute
	)
	var res simResult
	var accepted int64
	for b.clock.Now().Sub(t0) < total {
		now := b.clock.Now()
		kept := inflight[:0]
		for _, r := range inflight {
			if now.Before(r.doneAt) {
				kept = append(kept, r)
				continue
			}
			actual := int64(-1)
			if reconcile {
				actual = r.actual
			}
			require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: r.id, ActualCost: actual}))
		}
		inflight = kept
		c, err := q.Claim(ctx, store.ClaimParams{})
		require.NoError(t, err)
		for _, tk := range c.Admitted {
			ok, retryAt := p.call(now, actualOf[tk.ID])
			if headers {
				// What an OpenAI-style response says, parsed as the activity package parses it.
				h := http.Header{}
				h.Set("x-ratelimit-limit-tokens", strconv.Itoa(int(quota)))
				h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(max(0, p.bucket.Level))))
				h.Set("x-ratelimit-reset-tokens", time.Duration((quota-p.bucket.Level)/p.perSecond*float64(time.Second)).String())
				if !ok {
					h.Set("retry-after-ms", strconv.FormatInt(retryAt.Sub(now).Milliseconds()+1, 10))
				}
				require.NoError(t, q.Observe(ctx, "llm", throttle.ParseRateLimitHeaders(h, now)))
			}
			if !ok {
				res.got429++
				require.NoError(t, q.Requeue(ctx, store.RequeueParams{TicketID: tk.ID, ActualCost: 0,
					NotBefore: retryAt, PauseKeys: []string{"llm"}, PauseUntil: retryAt}))
				continue
			}
			if now.Sub(t0) >= warmup {
				accepted += actualOf[tk.ID]
			}
			inflight = append(inflight, running{tk.ID, now.Add(latency), actualOf[tk.ID]})
		}
		b.clock.Add(step)
	}
	res.share = float64(accepted) / (quota * (total - warmup).Minutes())
	return res
}

// TestQueue_FeedbackSimulation shows what reconciliation buys when the cost estimator is off by 2x,
// against a provider that enforces the same quota Sluice is configured with.
func TestQueue_FeedbackSimulation(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a few thousand claims in virtual time")
	}
	for _, c := range []struct {
		name      string
		factor    float64
		reconcile bool
		headers   bool
	}{
		{"Overestimate2x/NoReconcile", 2, false, false},
		{"Overestimate2x/Reconcile", 2, true, false},
		{"Underestimate2x/NoReconcile", 0.5, false, false},
		{"Underestimate2x/Reconcile", 0.5, true, false},
		{"Underestimate2x/ReconcileAndHeaders", 0.5, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := simulate(t, c.factor, c.reconcile, c.headers)
			t.Logf("%s: %.1f%% of the token quota used, %d 429s", c.name, 100*r.share, r.got429)
			switch {
			case c.headers:
				require.GreaterOrEqual(t, r.share, 0.9)
				require.LessOrEqual(t, r.got429, 50, "the provider's remaining count keeps admission from overshooting")
			case c.reconcile:
				require.GreaterOrEqual(t, r.share, 0.9, "reconciled, Sluice runs the quota near capacity")
				if c.factor > 1 {
					require.Zero(t, r.got429, "an overestimate never over-admits")
				}
			case c.factor > 1:
				require.Less(t, r.share, 0.6, "unreconciled overestimates waste about half the quota")
				require.Zero(t, r.got429)
			default:
				require.Positive(t, r.got429, "unreconciled underestimates over-admit into 429s")
			}
		})
	}
}
