package interceptor_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// provider stands for an LLM API whose answers the activities report to Sluice.
type provider struct {
	mu         sync.Mutex
	refused    map[string]bool // activity IDs refused once with a 429
	pauseUntil time.Time
	refusedAt  time.Time
	starts     []time.Time // when each call reached the provider
	facts      []sluiceactivity.Info
	attempts   []int32
	headers    http.Header
}

// Call uses `used` tokens, or refuses the first call of every activity whose ID is listed.
func (p *provider) Call(ctx context.Context, used int64) (int64, error) {
	info := activity.GetInfo(ctx)
	p.mu.Lock()
	p.starts = append(p.starts, time.Now())
	refuse := p.refused != nil && !p.refused[info.ActivityID] && info.ActivityID == "1"
	if refuse {
		p.refused[info.ActivityID] = true
	}
	hdr := p.headers
	p.mu.Unlock()
	if hdr != nil {
		if err := sluiceactivity.ReportHeaders(ctx, hdr); err != nil {
			return 0, err
		}
	}
	if refuse {
		h := http.Header{}
		h.Set("retry-after-ms", "1500")
		err := sluiceactivity.RateLimited(ctx, h)
		var te *sluiceactivity.ThrottledError
		require.ErrorAs(nil, err, &te)
		p.mu.Lock()
		p.pauseUntil, p.refusedAt = te.RetryAfter, p.starts[len(p.starts)-1]
		p.mu.Unlock()
		return 0, err
	}
	if err := sluiceactivity.ReportUsage(ctx, used); err != nil {
		return 0, err
	}
	f, _ := sluiceactivity.Admission(ctx)
	p.mu.Lock()
	p.facts = append(p.facts, f)
	p.attempts = append(p.attempts, info.Attempt)
	p.mu.Unlock()
	return used, nil
}

func CallAll(ctx workflow.Context, used []int64) (int64, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	var fs []workflow.Future
	for i, u := range used {
		fs = append(fs, workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID: string(rune('1' + i)), StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
		}), "Call", u))
	}
	var sum int64
	for _, f := range fs {
		var v int64
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func (e *env) feedbackWorker(t *testing.T, p *provider, limit throttle.Limit) {
	t.Helper()
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Logger: testenv.Logger(t),
		Pool:   e.pool, Client: e.c, Schema: e.schema, Limits: []throttle.Limit{limit},
		Routes:       map[string]sluiceinterceptor.Route{"Call": {Limits: []string{limit.Key}, Cost: func([]any) (int64, error) { return 400, nil }}},
		PollInterval: 100 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	w := worker.New(e.c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}})
	w.RegisterWorkflow(CallAll)
	w.RegisterActivityWithOptions(p.Call, activity.RegisterOptions{Name: "Call"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
}

func (e *env) callAll(t *testing.T, ctx context.Context, used ...int64) int64 {
	t.Helper()
	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue}, CallAll, used)
	require.NoError(t, err)
	var sum int64
	require.NoError(t, run.Get(ctx, &sum))
	return sum
}

func TestPlugin_ReportedUsageIsReconciled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	p := &provider{}
	// A budget of 1000 tokens that refills at 0.1 a second: what the calls leave is what we read.
	e.feedbackWorker(t, p, throttle.Limit{Key: "llm", TokensPerMinute: 6, TokenBurst: 1000})

	// The bucket refills at 0.1 token a second: the level read may exceed the expected one by what
	// has refilled since the run began, and by no more (plus rounding).
	start := time.Now()
	requireLevel := func(want float64) {
		t.Helper()
		requireSettled(t, ctx, e.q)
		st, err := e.q.LimitStatus(ctx, "llm")
		require.NoError(t, err)
		refilled := 0.1 * time.Since(start).Seconds()
		require.GreaterOrEqual(t, st.State.Tokens.Level, want-0.01)
		require.LessOrEqual(t, st.State.Tokens.Level, want+refilled+0.01)
	}
	e.callAll(t, ctx, 200) // reserved 400, used half: the other half comes back
	requireLevel(800)
	e.callAll(t, ctx, 1200) // reserved 400 of the 800 left, used 800 more than that: 400 of debt
	requireLevel(-400)

	require.Len(t, p.facts, 2)
	require.Equal(t, []string{"llm"}, p.facts[0].Limits)
	require.Equal(t, int64(400), p.facts[0].ReservedCost)
	require.GreaterOrEqual(t, p.facts[0].Waited, time.Duration(0))
	requireHealthy(t, e.q)
}

func TestPlugin_RateLimitedPausesTheKeyOnEveryWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	p := &provider{refused: map[string]bool{}}
	limit := throttle.Limit{Key: "llm", MaxConcurrent: 1}
	e.feedbackWorker(t, p, limit)
	e.feedbackWorker(t, p, limit)

	// Activity 1 is refused once; the others queue behind it on one slot.
	require.Equal(t, int64(60), e.callAll(t, ctx, 10, 10, 10, 10, 10, 10))
	p.mu.Lock()
	defer p.mu.Unlock()
	require.False(t, p.pauseUntil.IsZero())
	refusedAt := p.refusedAt
	var afterPause int
	for _, s := range p.starts {
		if s.Equal(refusedAt) {
			continue
		}
		require.False(t, s.After(refusedAt) && s.Before(p.pauseUntil.Add(-50*time.Millisecond)),
			"a call at %s reached the provider during the pause (until %s)", s, p.pauseUntil)
		if !s.Before(p.pauseUntil.Add(-50 * time.Millisecond)) {
			afterPause++
		}
	}
	require.Equal(t, 6, afterPause+countBefore(p.starts, refusedAt), "the refused call ran again after the reset, with every other")
	for _, a := range p.attempts {
		require.Equal(t, int32(1), a, "the 429 spent no Temporal attempt")
	}
	var requeued int
	for _, f := range p.facts {
		requeued += f.Requeues
	}
	require.Equal(t, 1, requeued)
	requireHealthy(t, e.q)
}

func TestPlugin_HeadersLowerTheRate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "30000")
	h.Set("x-ratelimit-remaining-tokens", "100")
	h.Set("x-ratelimit-reset-tokens", "1s")
	p := &provider{headers: h}
	e.feedbackWorker(t, p, throttle.Limit{Key: "llm", TokensPerMinute: 60_000})
	began := time.Now()
	e.callAll(t, ctx, 400)
	requireSettled(t, ctx, e.q)
	st, err := e.q.LimitStatus(ctx, "llm")
	require.NoError(t, err)
	require.Equal(t, 30_000.0, st.Effective.TokensPerMinute, "learned from the headers, below the configured 60k")
	require.Equal(t, 60_000.0, st.Configured.TokensPerMinute)
	// The headers came after the call began: since then the bucket refilled at most 500 tokens a
	// second (30,000 a minute) from the 100 they said remain, and the call's release gave back at
	// most its 400. A bound on the refill, not a margin of time, so a slow machine cannot break it.
	refill := 30_000.0 / 60 * time.Since(began).Seconds()
	require.LessOrEqual(t, st.State.Tokens.Level, 100+400+refill,
		"the bucket holds no more than the provider said remains, plus refill and the call's refund")
}

func countBefore(ts []time.Time, t0 time.Time) int {
	n := 0
	for _, t := range ts {
		if t.Before(t0) {
			n++
		}
	}
	return n
}
