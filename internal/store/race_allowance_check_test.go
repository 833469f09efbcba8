package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// readAllowanceTickets reads every ticket of schema, each finished: completed (admitted, its usage
// reported) or refused.
func readAllowanceTickets(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) []allowanceTicket {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT id, limit_keys, admitted_at, deadline, cost, output_cost, cost_money,
		coalesce(actual_cost, -1), coalesce(actual_output, 0), coalesce(actual_money, -1), state, coalesce(outcome_kind, ''), outcome
		FROM `+schema+`.sluice_ticket ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []allowanceTicket
	for rows.Next() {
		var (
			tk                          allowanceTicket
			admitted, deadline          *time.Time
			cost, output, money         int64
			actual, actOut, actualMoney int64
			state, kind                 string
			outcome                     []byte
		)
		require.NoError(t, rows.Scan(&tk.id, &tk.keys, &admitted, &deadline, &cost, &output, &money, &actual, &actOut,
			&actualMoney, &state, &kind, &outcome))
		require.Equal(t, "finished", state, "ticket %d", tk.id)
		if deadline != nil {
			tk.deadline = deadline.UTC()
		}
		tk.reserved = throttle.Spend{Tokens: admit.CostOf(cost, output), Money: money}
		if kind == store.OutcomeRefused {
			r, err := store.TicketRefusal(store.Ticket{ID: tk.id, OutcomeKind: kind, Outcome: outcome})
			require.NoError(t, err)
			tk.refusal = &r
			require.Nil(t, admitted, "refused ticket %d was admitted", tk.id)
		} else {
			require.NotNil(t, admitted, "ticket %d", tk.id)
			require.GreaterOrEqual(t, actual, int64(0), "ticket %d reported its usage", tk.id)
			require.GreaterOrEqual(t, actualMoney, int64(0), "ticket %d reported its cost", tk.id)
			tk.admitted = admitted.UTC()
			tk.actual = throttle.Spend{Tokens: admit.CostOf(actual, actOut), Money: actualMoney}
		}
		out = append(out, tk)
	}
	require.NoError(t, rows.Err())
	return out
}

// requireAllowancesHeld fails when the usage of the tickets admitted in any window of an allowance
// (its calendar windows; for a rolling one, the trailing window at each admission) is above its
// amount. With usage at or below every reservation, that is what the allowance promises.
func requireAllowancesHeld(t *testing.T, byKey map[string]throttle.Limit, tickets []allowanceTicket) {
	t.Helper()
	for key, l := range byKey {
		for _, a := range l.Allowances {
			windows := map[time.Time]int64{}
			var admitted []allowanceTicket
			for _, tk := range tickets {
				if tk.refusal != nil || !contains(tk.keys, key) {
					continue
				}
				admitted = append(admitted, tk)
				if a.Calendar != "" {
					start, _ := a.Window(tk.admitted)
					windows[start] += a.Of(tk.actual)
				}
			}
			for start, used := range windows {
				require.LessOrEqual(t, used, a.Amount, "%s %s: the window from %s", key, a, start)
			}
			if a.Rolling > 0 {
				for _, at := range admitted {
					var used int64
					for _, tk := range admitted {
						if !tk.admitted.After(at.admitted) && tk.admitted.After(at.admitted.Add(-a.Rolling)) {
							used += a.Of(tk.actual)
						}
					}
					require.LessOrEqual(t, used, a.Amount, "%s %s: the window to %s", key, a, at.admitted)
				}
			}
			t.Logf("%s %s: %d tickets admitted, usage by window %v", key, a, len(admitted), windows)
		}
	}
}

// requireAllowancesReconciled fails when what a calendar allowance's state counts in its window at
// now is not the reported usage of the tickets admitted in that window: every reservation was
// reconciled, once.
func requireAllowancesReconciled(t *testing.T, ctx context.Context, q *store.Queue, byKey map[string]throttle.Limit,
	tickets []allowanceTicket, now time.Time) {
	t.Helper()
	for key, l := range byKey {
		ls, err := q.LimitStatus(ctx, key)
		require.NoError(t, err)
		for i, a := range l.Allowances {
			if a.Calendar == "" {
				continue
			}
			start, _ := a.Window(now)
			var want int64
			for _, tk := range tickets {
				if tk.refusal == nil && contains(tk.keys, key) && !tk.admitted.Before(start) {
					want += a.Of(tk.actual)
				}
			}
			got := ls.Allowances[i]
			require.Equal(t, a, got.Allowance)
			require.Equal(t, want, got.Used, "%s %s: counted in the window from %s", key, a, start)
			require.Equal(t, max(0, a.Amount-want), got.Remaining)
		}
	}
}

// requireRefusalsJustified fails when a refused ticket's refusal does not hold: the allowance had
// room for it, or it says refuse-or-wait wrongly.
func requireRefusalsJustified(t *testing.T, tickets []allowanceTicket) {
	t.Helper()
	for _, tk := range tickets {
		r := tk.refusal
		if r == nil {
			continue
		}
		a := r.Spent.Allowance
		require.Greater(t, r.Spent.Used+r.Spent.Needs, a.Amount, "ticket %d refused by %s with room", tk.id, a)
		require.True(t, r.Spent.Refuses(tk.deadline), "ticket %d refused by %s, which it may wait for", tk.id, a)
		when := "resets at " // a calendar window's end
		if a.Rolling > 0 {
			when = "room again at "
		}
		require.Contains(t, r.Error(), when+r.Spent.ResetAt.UTC().Format(time.RFC3339), "ticket %d", tk.id)
	}
}

func contains(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}
