package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// Input and output budgets through the tables: reserved at admission, each refunded from the usage
// a completion reports (through the release ledger), and written to the usage history by dimension.
func TestQueue_InputAndOutputBudgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "anthropic", InputTokensPerMinute: 60_000, InputTokenBurst: 10_000,
		OutputTokensPerMinute: 600, OutputTokenBurst: 1_000})
	var ts []store.Ticket
	for range 3 {
		ts = append(ts, enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 500, OutputCost: 400}))
	}
	require.Equal(t, throttle.Cost{Input: 100, Output: 400}, ts[0].Reserved())

	res := claim(t, q, store.ClaimParams{})
	require.Equal(t, ids(ts[:2]), ids(res.Admitted), "1,000 output tokens hold two reservations of 400")
	require.Equal(t, throttle.ReasonOutputTokens, res.Blocked["anthropic"])
	require.True(t, res.WaitsOnRelease, "a completion's refund can make room")
	waiting, err := q.Ticket(ctx, ts[2].ID)
	require.NoError(t, err)
	require.Equal(t, "output_tokens", waiting.WaitReason)

	// The first used 300 input tokens (200 above its estimate) and 100 output tokens (300 below).
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: ts[0].ID, ActualCost: 400, ActualOutput: 100,
		OutcomeKind: store.OutcomeCompleted}))
	done, err := q.Ticket(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, int64(400), done.ActualCost)
	require.Equal(t, int64(100), done.ActualOutput)
	st, err := q.LimitStatus(ctx, "anthropic")
	require.NoError(t, err)
	require.InDelta(t, 10_000-200-200, st.State.InputTokens.Level, 1e-9, "input above the estimate is debt")
	require.InDelta(t, 200+300, st.State.OutputTokens.Level, 1e-9, "the unused output comes back")

	res = claim(t, q, store.ClaimParams{})
	require.Equal(t, ids(ts[2:]), ids(res.Admitted), "the refund let the third in, the clock not having moved")

	var tokens, input, output int64
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT sum(tokens), sum(input_tokens), sum(output_tokens) FROM `+
		q.Schema()+`.sluice_usage WHERE key = 'anthropic'`).Scan(&tokens, &input, &output))
	require.Equal(t, []int64{1_500 - 100, 300 + 200, 1_200 - 300}, []int64{tokens, input, output},
		"three reservations, less what the report gave back, by dimension")
	var returnedInput, returnedOutput int64
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT sum(returned_input), sum(returned_output) FROM `+
		q.Schema()+`.sluice_usage WHERE key = 'anthropic'`).Scan(&returnedInput, &returnedOutput))
	require.Equal(t, []int64{-200, 300}, []int64{returnedInput, returnedOutput}, "what the report gave back, apart")
	requireHealthy(t, q)

	_, err = q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 10, OutputCost: 11, Owner: "o"})
	require.ErrorContains(t, err, "EnqueueParams.OutputCost must be in [0, Cost 10], got 11")
}

// Rows written before the token dimensions existed migrate unchanged: a single-budget limit keeps its
// configuration and bucket, its tickets reserve and reconcile their cost as they did.
func TestMigration006_KeepsSingleBudgetLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	opts := store.MigrateOptions{Schema: schema}
	require.NoError(t, store.MigrateDown(ctx, pool, opts, 5))
	at := t0.Add(-time.Minute)
	_, err := pool.Exec(ctx, `SET search_path TO `+schema+`;
		INSERT INTO sluice_limit (key, requests_per_second, burst, tokens_per_minute, token_burst, token_level, token_at,
			inflight_count, inflight_tokens)
		VALUES ('openai', 10, 10, 6000, 3000, 1000, '`+at.Format(time.RFC3339Nano)+`', 1, 700);
		INSERT INTO sluice_ticket (state, line_key, limit_keys, cost, seq, owner, admitted_at)
		VALUES ('running', 'openai', '{openai}', 700, 1, 'w', now()), ('queued', 'openai', '{openai}', 2500, 2, 'w', NULL);
		RESET search_path`)
	require.NoError(t, err)
	res, err := store.Migrate(ctx, pool, opts)
	require.NoError(t, err)
	require.Equal(t, []int{6, 7, 8, 9, 10, 11, 12, 13, 14}, res.Applied)

	clock := &fakeClock{t: t0}
	q, err := store.New(pool, store.Options{Schema: schema, Now: clock.Now})
	require.NoError(t, err)
	st, err := q.LimitStatus(ctx, "openai")
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "openai", RequestsPerSecond: 10, Burst: 10, TokensPerMinute: 6000, TokenBurst: 3000}, st.Configured)
	require.Equal(t, throttle.State{Tokens: throttle.Bucket{Level: 1000, At: at}, InflightCount: 1, InflightTokens: 700}, st.State)

	// A minute at 100 tokens a second refills 6,000, capped at the burst of 3,000: the 2,500 fit.
	claimed := claim(t, q, store.ClaimParams{})
	require.Len(t, claimed.Admitted, 1)
	require.Equal(t, throttle.Tokens(2500), claimed.Admitted[0].Reserved(), "a cost reserved as one figure is input")
	running, _, err := q.Tickets(ctx, "openai", 10)
	require.NoError(t, err)
	var old store.Ticket
	for _, tk := range running {
		if tk.Cost == 700 {
			old = tk.Ticket
		}
	}
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: old.ID, ActualCost: 200, OutcomeKind: store.OutcomeCompleted}))
	st, err = q.LimitStatus(ctx, "openai")
	require.NoError(t, err)
	require.InDelta(t, 3000-2500+500, st.State.Tokens.Level, 1e-9, "the 700 reserved before the migration reconcile as before")
	require.Zero(t, st.State.InputTokens)
	require.Zero(t, st.State.OutputTokens)
	requireHealthy(t, q)
}

// What the provider says remains counts what finished calls gave back: Observe folds the releases
// pending in the ledger before it lowers the buckets, so that a later claim does not give them back a
// second time.
func TestQueue_ObserveFoldsPendingReleasesFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000, OutputTokenBurst: 3_000})
	tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"anthropic"}, Cost: 1_000, OutputCost: 1_000})
	require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
	// Used 400 of its 1,000: 600 wait in the ledger for the next claim.
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: 400, ActualOutput: 400, OutcomeKind: store.OutcomeCompleted}))

	require.NoError(t, q.Observe(ctx, "anthropic", throttle.RateLimitInfo{
		OutputTokens: throttle.TokenWindow{Limit: 6_000, Remaining: 2_500, HasRemaining: true}}))
	st, err := q.LimitStatus(ctx, "anthropic")
	require.NoError(t, err)
	require.InDelta(t, 2_500, st.State.OutputTokens.Level, 1e-9, "the provider's figure, the refund not added again")
	var pending int
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT count(*) FROM `+q.Schema()+`.sluice_release`).Scan(&pending))
	require.Zero(t, pending)
	var output int64
	require.NoError(t, q.Pool().QueryRow(ctx, `SELECT sum(output_tokens) FROM `+q.Schema()+`.sluice_usage`).Scan(&output))
	require.Equal(t, int64(400), output, "the refund is in the usage history")
	requireHealthy(t, q)
}
