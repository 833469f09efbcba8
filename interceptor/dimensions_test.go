package interceptor_test

import (
	"context"
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

// AskClaude reports an Anthropic response's usage: 50 input tokens, 30 written to the prompt cache,
// 500 read from it, 120 output tokens. It returns what Sluice reserved for it.
func AskClaude(ctx context.Context) (throttle.Cost, error) {
	err := sluiceactivity.ReportAnthropicUsage(ctx, sluiceactivity.AnthropicUsage{
		InputTokens: 50, CacheCreationInputTokens: 30, CacheReadInputTokens: 500, OutputTokens: 120})
	if err != nil {
		return throttle.Cost{}, err
	}
	info, _ := sluiceactivity.Admission(ctx)
	return info.Reserved, nil
}

func AskClaudeOnce(ctx workflow.Context) (throttle.Cost, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	var c throttle.Cost
	err := workflow.ExecuteActivity(ctx, "AskClaude").Get(ctx, &c)
	return c, err
}

// A route's Tokens reserve input and output apart, and an Anthropic usage report reconciles each
// with its own budget, by Anthropic's counting rule (cache reads do not count toward input).
func TestPlugin_InputAndOutputBudgets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	// Budgets that refill at 0.1 token a second: what the call leaves is what we read.
	limit := throttle.Limit{Key: "anthropic", InputTokensPerMinute: 6, InputTokenBurst: 1000, OutputTokensPerMinute: 6, OutputTokenBurst: 1000}
	opts := sluiceinterceptor.Options{
		Logger: testenv.Logger(t), Pool: e.pool, Client: e.c, Schema: e.schema, Limits: []throttle.Limit{limit},
		Routes: map[string]sluiceinterceptor.Route{"AskClaude": {Limits: []string{"anthropic"},
			Tokens: func([]any) (throttle.Cost, error) { return throttle.Cost{Input: 100, Output: 300}, nil }}},
		PollInterval: 100 * time.Millisecond,
	}
	bad := opts
	bad.Routes = map[string]sluiceinterceptor.Route{"AskClaude": {Limits: []string{"anthropic"}, Tokens: opts.Routes["AskClaude"].Tokens,
		Cost: func([]any) (int64, error) { return 1, nil }}}
	_, err := sluiceinterceptor.NewPlugin(bad)
	require.ErrorContains(t, err, `Options.Routes["AskClaude"] sets both Cost and Tokens`)

	plugin, err := sluiceinterceptor.NewPlugin(opts)
	require.NoError(t, err)
	w := worker.New(e.c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}})
	w.RegisterWorkflow(AskClaudeOnce)
	w.RegisterActivityWithOptions(AskClaude, activity.RegisterOptions{Name: "AskClaude"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	start := time.Now()
	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue}, AskClaudeOnce)
	require.NoError(t, err)
	var reserved throttle.Cost
	require.NoError(t, run.Get(ctx, &reserved))
	require.Equal(t, throttle.Cost{Input: 100, Output: 300}, reserved)

	// The completion's refund is folded in by the next claim (or a status read, as here), once the
	// completion has committed.
	requireSettled(t, ctx, e.q)
	st, err := e.q.LimitStatus(ctx, "anthropic")
	require.NoError(t, err)
	refilled := 0.1*time.Since(start).Seconds() + 0.01
	// Input: 100 reserved, 50 + 30 counted, 20 back. Output: 300 reserved, 120 used, 180 back.
	require.InDelta(t, 1000-100+20, st.State.InputTokens.Level, refilled)
	require.InDelta(t, 1000-300+180, st.State.OutputTokens.Level, refilled)
	require.GreaterOrEqual(t, st.State.InputTokens.Level, 920-0.01)
	require.GreaterOrEqual(t, st.State.OutputTokens.Level, 880-0.01)
	requireHealthy(t, e.q)
}
