package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

func allowances(t *testing.T, specs ...string) throttle.Allowances {
	t.Helper()
	var as throttle.Allowances
	for _, s := range specs {
		a, err := throttle.ParseAllowance(s)
		require.NoError(t, err)
		as = append(as, a)
	}
	return as
}

func TestQueue_Allowances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dayEnd := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) // t0 is noon UTC

	t.Run("WaitAdmitsAtTheResetAndStatusSaysWhen", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "plan", Allowances: allowances(t, "tokens=1000/day")})
		for range 3 {
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"plan"}, Cost: 400})
		}
		res := claim(t, q, store.ClaimParams{})
		require.Len(t, res.Admitted, 2)
		require.Equal(t, throttle.ReasonAllowance, res.Blocked["plan"])
		require.Equal(t, dayEnd, res.RetryAt)

		st, err := q.Status(ctx, "plan")
		require.NoError(t, err)
		require.Equal(t, []store.AllowanceStatus{{Allowance: allowances(t, "tokens=1000/day")[0], Spec: "tokens=1000/day",
			Used: 800, Remaining: 200, WindowStart: dayEnd.Add(-24 * time.Hour), ResetsAt: dayEnd}}, st[0].Allowances)
		require.Equal(t, "allowance", st[0].HeadWaitReason)

		// Usage reported below the reservation is given back in the window it was admitted in.
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: res.Admitted[0].ID, ActualCost: 100}))
		ls, err := q.LimitStatus(ctx, "plan")
		require.NoError(t, err)
		require.Equal(t, int64(500), ls.Allowances[0].Used, "the pending reconciliation is folded into what status reads")
		res = claim(t, q, store.ClaimParams{})
		require.Len(t, res.Admitted, 1, "the refund made room for the third")

		// The day's last ticket is reconciled after midnight: yesterday's refund does not credit today.
		b.clock.Add(12 * time.Hour)
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: res.Admitted[0].ID, ActualCost: 0}))
		ls, err = q.LimitStatus(ctx, "plan")
		require.NoError(t, err)
		require.Zero(t, ls.Allowances[0].Used)
		require.Equal(t, dayEnd, ls.Allowances[0].WindowStart)
	})

	t.Run("RefuseFinishesTheTicketWithItsRefusal", func(t *testing.T) {
		t.Parallel()
		as := allowances(t, "usd=0.01/day")
		as[0].OnSpent = throttle.OnSpentRefuse
		q, _ := setup(t, throttle.Limit{Key: "llm", MaxConcurrent: 10}, throttle.Limit{Key: "tenant:free", Allowances: as})
		first := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"llm", "tenant:free"}, CostMoney: 8_000})
		second := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"llm", "tenant:free"}, CostMoney: 8_000})
		other := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"llm"}})
		res := claim(t, q, store.ClaimParams{})
		require.Equal(t, []int64{first.ID, other.ID}, ticketIDs(res.Admitted))
		require.Empty(t, res.Refused, "while first is in flight its refund could make room: second waits")

		// first reports all it reserved: nothing can come back today, so second is refused.
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: first.ID, ActualCost: -1, ActualMoney: 8_000}))
		res = claim(t, q, store.ClaimParams{})
		require.Empty(t, res.Admitted)
		require.Len(t, res.Refused, 1)
		require.Equal(t, second.ID, res.Refused[0].ID)

		stored, err := q.Ticket(ctx, second.ID)
		require.NoError(t, err)
		require.Equal(t, store.TicketStateFinished, stored.State)
		require.Equal(t, store.OutcomeRefused, stored.OutcomeKind)
		r, err := store.TicketRefusal(stored)
		require.NoError(t, err)
		require.Equal(t, "tenant:free", r.Limit)
		require.Equal(t, "sluice: limit tenant:free: allowance usd=0.01/day spent: used 0.008 USD of 0.01 USD, the call needs 0.008 USD; "+
			"resets at 2026-01-02T00:00:00Z (2026-01-02 00:00 UTC)", r.Error())
		require.Equal(t, "allowance of tenant:free", stored.WaitReason)
		var old refusalV010 // what a replica of 0.1.0 reads when it delivers it during a rolling upgrade
		require.NoError(t, json.Unmarshal(stored.Outcome, &old))
		require.Equal(t, refusalV010{Key: r.Limit, Spent: r.Spent}, old)
		delivered, err := q.TakeDeliveries(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.ElementsMatch(t, []int64{first.ID, second.ID}, ticketIDs(delivered), "any replica's deliverer completes first and fails second")
		requireHealthy(t, q)
	})

	t.Run("ACancelledTicketGivesBackItsRequest", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "k", Allowances: allowances(t, "requests=1/hour")})
		a := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		b := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}})
		require.Equal(t, []int64{a.ID}, ticketIDs(claim(t, q, store.ClaimParams{}).Admitted))
		require.NoError(t, q.Cancel(ctx, a.ID), "admitted, never run")
		require.Equal(t, []int64{b.ID}, ticketIDs(claim(t, q, store.ClaimParams{}).Admitted))
	})

	t.Run("TheLedgerOfARemovedAllowanceIsKeptUntilReconciled", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 5, Allowances: allowances(t, "tokens=1000/day")})
		tk := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100})
		require.Len(t, claim(t, q, store.ClaimParams{}).Admitted, 1)
		require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: tk.ID, ActualCost: 50}))
		ledger := func() (n int) {
			require.NoError(t, q.Pool().QueryRow(ctx, `SELECT count(*) FROM `+q.Schema()+`.sluice_allowance_release`).Scan(&n))
			return n
		}
		require.Equal(t, 1, ledger(), "the usage waits for the next claim on k")
		_, err := q.Prune(ctx, store.PruneParams{})
		require.NoError(t, err)
		require.Equal(t, 1, ledger(), "kept while k has allowances")
		none := throttle.Allowances{}
		_, err = q.ChangeLimit(ctx, "k", throttle.LimitChange{Allowances: &none}, false)
		require.NoError(t, err)
		_, err = q.Prune(ctx, store.PruneParams{})
		require.NoError(t, err)
		require.Equal(t, 1, ledger(), "kept while the removed allowance's state still counts today's ticket")

		// The next claim on k reconciles the row with the removed allowance's kept state.
		b.clock.Add(25 * time.Hour)
		next := enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k"}, Cost: 100})
		require.Equal(t, []int64{next.ID}, ticketIDs(claim(t, q, store.ClaimParams{}).Admitted))
		require.Zero(t, ledger())
		requireHealthy(t, q)
	})

	t.Run("ChangeLimitAndHistoryKeepAllowances", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t)
		as := allowances(t, "tokens=5000000/day@America/Los_Angeles", "usd=5.00/month")
		l, err := q.ChangeLimit(ctx, "openai", throttle.LimitChange{Allowances: &as}, true)
		require.NoError(t, err)
		require.Equal(t, as, l.Allowances)
		none := throttle.Allowances{}
		_, err = q.ChangeLimit(ctx, "openai", throttle.LimitChange{Allowances: &none}, false)
		require.ErrorIs(t, err, store.ErrInvalidLimit, "a limit of nothing is refused")
		got, err := q.Limit(ctx, "openai")
		require.NoError(t, err)
		require.True(t, got.Equal(l))
		recs, err := q.LimitHistory(ctx, "openai", time.Time{}, 10)
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.Equal(t, as, recs[0].After.Allowances)
	})

	t.Run("ADailyFigureInTheHeadersLowersTheDaysAllowance", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "openai", RequestsPerSecond: 50, Allowances: allowances(t, "requests=10000/day")})
		require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{RequestsLimit: 1000, RequestsRemaining: 400,
			HasRequestsRemaining: true, RequestsReset: t0.Add(time.Hour), RequestsWindow: 24 * time.Hour}))
		ls, err := q.LimitStatus(ctx, "openai")
		require.NoError(t, err)
		require.Equal(t, 50.0, ls.Effective.RequestsPerSecond, "a daily figure is not a rate")
		require.Equal(t, int64(10_000), ls.Configured.Allowances[0].Amount)
		require.Equal(t, int64(1000), ls.Allowances[0].Allowance.Amount)
		require.Equal(t, int64(600), ls.Allowances[0].Used, "what the provider says is used")
		recs, err := q.LimitHistory(ctx, "openai", time.Time{}, 10)
		require.NoError(t, err)
		var learned []store.LimitRecord
		for _, r := range recs {
			if r.Kind == store.ChangeLearned {
				learned = append(learned, r)
			}
		}
		require.Len(t, learned, 1)
		require.Equal(t, int64(1000), learned[0].After.Allowances[0].Amount, "the history records what was learned")
	})
}

func ticketIDs(ts []store.Ticket) []int64 {
	var ids []int64
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

// refusalV010 is pgqueue.Refusal of 0.1.0, as a replica of 0.1.0 stores and reads a refused ticket's
// outcome.
type refusalV010 struct {
	Key   string         `json:"key"`
	Spent throttle.Spent `json:"spent"`
}

// TestTicketRefusal_Upgrade: during a rolling upgrade replicas of 0.1.0 and of this version share
// one table, each delivering refusals the other stored.
func TestTicketRefusal_Upgrade(t *testing.T) {
	t.Parallel()
	a, err := throttle.ParseAllowance("usd=0.01/day@America/Los_Angeles")
	require.NoError(t, err)
	a.OnSpent = throttle.OnSpentRefuse
	start, end := a.Window(time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC))
	r := throttle.Refusal{Limit: "tenant:free", Spent: throttle.Spent{Allowance: a, Used: 8_000, Needs: 8_000, Refundable: 1_000,
		WindowStart: start.UTC(), WindowEnd: end.UTC(), ResetAt: end.UTC(), Deadline: end.Add(-time.Hour).UTC()}}

	t.Run("ReadsWhat010Stored", func(t *testing.T) {
		t.Parallel()
		outcome, err := json.Marshal(refusalV010{Key: r.Limit, Spent: r.Spent})
		require.NoError(t, err)
		got, err := store.TicketRefusal(store.Ticket{ID: 7, OutcomeKind: store.OutcomeRefused, Outcome: outcome})
		require.NoError(t, err)
		require.Equal(t, r, got)
		require.Equal(t, "sluice: limit tenant:free: allowance usd=0.01/day@America/Los_Angeles spent: used 0.008 USD of 0.01 USD, "+
			"the call needs 0.008 USD; resets at 2026-03-08T08:00:00Z (2026-03-08 00:00 PST)", got.Error())
	})

	t.Run("AnOutcomeThatIsNotARefusalIsAnError", func(t *testing.T) {
		t.Parallel()
		_, err := store.TicketRefusal(store.Ticket{ID: 7, OutcomeKind: store.OutcomeRefused, Outcome: []byte(`{"key":`)})
		require.ErrorContains(t, err, "sluice: refusal of ticket 7: ")
	})
}
