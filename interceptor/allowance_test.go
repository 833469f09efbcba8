package interceptor_test

import (
	"context"
	"sync/atomic"
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
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// askInput is AskUntilRefused's input: how many calls, and the ScheduleToClose of each.
type askInput struct {
	N               int
	ScheduleToClose time.Duration
}

// askResult is how AskUntilRefused ended: the calls that succeeded, and the refusal, if one came.
type askResult struct {
	Done    int
	Refused *sluiceactivity.AllowanceSpent
}

// AskUntilRefused calls Ask N times in turn, each with a retry policy of 5 attempts, and stops at the
// first refusal for a spent allowance: the branch a product takes to tell its user the plan is spent.
func AskUntilRefused(ctx workflow.Context, in askInput) (askResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		ScheduleToCloseTimeout: in.ScheduleToClose, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 5}})
	var res askResult
	for range in.N {
		err := workflow.ExecuteActivity(ctx, "Ask").Get(ctx, nil)
		if spent, ok := sluiceactivity.AsAllowanceSpent(err); ok {
			res.Refused = &spent
			return res, nil
		}
		if err != nil {
			return res, err
		}
		res.Done++
	}
	return res, nil
}

// asker is an LLM call that uses half the input and output tokens its route estimates.
type asker struct{ attempts atomic.Int64 }

func (a *asker) Ask(ctx context.Context) error {
	a.attempts.Add(1)
	return sluiceactivity.ReportModelUsage(ctx, "", throttle.Usage{Input: 500, CachedInput: 100, Output: 250})
}

func startAsker(t *testing.T, e *env, tenant throttle.Limit) *asker {
	t.Helper()
	prices := &throttle.PriceTable{Currency: "USD", Models: map[string]throttle.Price{
		"m": {Input: 1_000_000, CachedInput: 500_000, Output: 2_000_000}}} // $1, $0.50 and $2 per million
	a := &asker{}
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: e.pool, Client: e.c, Schema: e.schema, Logger: e.log, PollInterval: 200 * time.Millisecond,
		Limits: []throttle.Limit{{Key: "llm", MaxConcurrent: 4}, tenant},
		Routes: map[string]sluiceinterceptor.Route{"Ask": {Limits: []string{"llm", tenant.Key}, Model: "m",
			Tokens: func([]any) (throttle.Cost, error) { return throttle.Cost{Input: 1000, Output: 500}, nil }}},
		Prices: prices,
	})
	require.NoError(t, err)
	w := worker.New(e.c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}})
	w.RegisterWorkflow(AskUntilRefused)
	w.RegisterActivityWithOptions(a.Ask, activity.RegisterOptions{Name: "Ask"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return a
}

// TestPlugin_SpentAllowanceRefusesWithItsReset: a tenant's $0.005 a day, refused when spent. Each call
// reserves the price of its estimate (1,000 input and 500 output tokens: $0.002) and is reconciled
// with the price of what it reported (400 input, 100 cached, 250 output: $0.00095), so the fifth
// call finds $0.0038 used and needs $0.002: it fails at once, once, with a non-retryable error of
// type SluiceAllowanceSpent that the workflow branches on, naming the allowance, its use and reset.
func TestPlugin_SpentAllowanceRefusesWithItsReset(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	spend, err := throttle.ParseAllowance("usd=0.005/day")
	require.NoError(t, err)
	spend.OnSpent = throttle.OnSpentRefuse
	a := startAsker(t, e, throttle.Limit{Key: "tenant:free", Allowances: throttle.Allowances{spend}})

	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue, ID: "wf-" + testdb.NewSchemaName()},
		AskUntilRefused, askInput{N: 10, ScheduleToClose: time.Hour})
	require.NoError(t, err)
	var res askResult
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 4, res.Done)
	require.Equal(t, int64(4), a.attempts.Load(), "the refused call never ran, and was not retried")
	require.NotNil(t, res.Refused)
	r := *res.Refused
	start, end := spend.Window(r.WindowStart)
	require.False(t, r.Deadline.IsZero(), "the call's deadline (ScheduleToClose) travels with the refusal")
	require.Equal(t, sluiceactivity.AllowanceSpent{Limit: "tenant:free", Spent: throttle.Spent{Allowance: spend, Used: 3_800, Needs: 2_000,
		ResetAt: end.UTC(), WindowStart: start.UTC(), WindowEnd: end.UTC(), Deadline: r.Deadline}}, r)

	// The workflow's history has the one failed attempt, with the message an operator reads.
	var failure *temporal.ApplicationError
	iter := e.c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, 0)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if f := ev.GetActivityTaskFailedEventAttributes(); f != nil {
			require.Nil(t, failure, "one failed attempt")
			require.Equal(t, sluiceactivity.ErrTypeAllowanceSpent, f.Failure.GetApplicationFailureInfo().GetType())
			require.True(t, f.Failure.GetApplicationFailureInfo().GetNonRetryable())
			require.Equal(t, "sluice: limit tenant:free: allowance usd=0.005/day spent: used 0.0038 USD of 0.005 USD, "+
				"the call needs 0.002 USD; resets at "+end.UTC().Format(time.RFC3339)+" ("+end.UTC().Format("2006-01-02 15:04 MST")+")",
				f.Failure.GetMessage())
			failure = &temporal.ApplicationError{}
		}
	}
	require.NotNil(t, failure)
	requireSettled(t, ctx, e.q) // the calls' completions commit after the workflow hears them
	st, err := e.q.LimitStatus(ctx, "tenant:free")
	require.NoError(t, err)
	require.Equal(t, int64(3_800), st.Allowances[0].Used, "four calls reconciled to what they cost")
	requireHealthy(t, e.q)
}

// TestPlugin_DeadlineBeforeTheResetIsRefused: an allowance that waits (one request in any 24 hours),
// and a call whose ScheduleToClose (a minute) ends before the allowance has room again: it is refused
// at once, not left to time out.
func TestPlugin_DeadlineBeforeTheResetIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	once, err := throttle.ParseAllowance("requests=1/24h")
	require.NoError(t, err)
	a := startAsker(t, e, throttle.Limit{Key: "tenant:wait", Allowances: throttle.Allowances{once}})
	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue, ID: "wf-" + testdb.NewSchemaName()},
		AskUntilRefused, askInput{N: 2, ScheduleToClose: time.Minute})
	require.NoError(t, err)
	var res askResult
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 1, res.Done)
	require.NotNil(t, res.Refused, "refused, not timed out")
	require.Equal(t, "requests=1/24h", res.Refused.Allowance.String())
	require.Equal(t, int64(1), res.Refused.Used)
	require.Greater(t, res.Refused.ResetAt.Sub(time.Now()), 23*time.Hour)
	require.Equal(t, int64(1), a.attempts.Load())
}
