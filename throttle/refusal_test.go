package throttle_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/v010"
	"github.com/sluicehq/sluice/throttle"
)

// refusals are refusals of every shape: calendar in a zone and refusing, with a deadline and
// refunds; rolling, never to have room; money.
func refusals(t *testing.T) map[string]throttle.Refusal {
	t.Helper()
	day := mustParse(t, "tokens=50000/day@America/Los_Angeles")
	day.OnSpent = throttle.OnSpentRefuse
	start, end := day.Window(utc(t, "2026-03-07T12:00:00Z"))
	return map[string]throttle.Refusal{
		"CalendarRefusesWithADeadline": {Limit: "tenant:free", Spent: throttle.Spent{Allowance: day, Used: 49_000, Needs: 2_000,
			Refundable: 300, WindowStart: start.UTC(), WindowEnd: end.UTC(), ResetAt: end.UTC(), Deadline: utc(t, "2026-03-07T13:00:00Z")}},
		"RollingNeverHasRoom": {Limit: "openai", Spent: throttle.Spent{Allowance: mustParse(t, "output_tokens=2000/24h"), Used: 10,
			Needs: 5_000}},
		"MoneyWaitsPastTheDeadline": {Limit: "team:a", Spent: throttle.Spent{Allowance: mustParse(t, "usd=5.00/day"), Used: 4_950_000,
			Needs: 85_000, WindowStart: utc(t, "2026-03-07T00:00:00Z"), WindowEnd: utc(t, "2026-03-08T00:00:00Z"),
			ResetAt: utc(t, "2026-03-08T00:00:00Z"), Deadline: utc(t, "2026-03-07T18:00:00Z")}},
	}
}

func TestRefusal_JSON(t *testing.T) {
	t.Parallel()
	for name, r := range refusals(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(r)
			require.NoError(t, err)

			t.Run("RoundTrips", func(t *testing.T) {
				var got throttle.Refusal
				require.NoError(t, json.Unmarshal(b, &got))
				require.Equal(t, r, got)
				require.Equal(t, r.Error(), got.Error())
			})
			t.Run("DecodesIntoTheDetailOf010", func(t *testing.T) {
				var old v010.AllowanceSpent
				require.NoError(t, json.Unmarshal(b, &old))
				a := r.Allowance
				require.Equal(t, v010.AllowanceSpent{Limit: r.Limit, Allowance: a.String(), Meter: a.Meter, Currency: a.Currency,
					Used: r.Used, Amount: a.Amount, Needs: r.Needs, ResetAt: r.ResetAt, WindowStart: r.WindowStart,
					WindowEnd: r.WindowEnd}, old)
			})
			t.Run("LeavesOutWhatIsZero", func(t *testing.T) {
				var members map[string]any
				require.NoError(t, json.Unmarshal(b, &members))
				_, deadline := members["deadline"]
				require.Equal(t, !r.Deadline.IsZero(), deadline)
				_, reset := members["reset_at"]
				require.Equal(t, !r.ResetAt.IsZero(), reset)
				require.NotContains(t, members, "key", "the legacy stored members are the store's, not the detail's")
				require.NotContains(t, members, "spent")
			})
		})
	}
}

func TestRefusal_UnmarshalJSON(t *testing.T) {
	t.Parallel()

	t.Run("ReadsTheDetailOf010", func(t *testing.T) {
		t.Parallel()
		// What a replica of 0.1.0 sent as the detail: no deadline, no on_spent.
		r := refusals(t)["MoneyWaitsPastTheDeadline"]
		a := r.Allowance
		b, err := json.Marshal(v010.AllowanceSpent{Limit: r.Limit, Allowance: a.String(), Meter: a.Meter, Currency: a.Currency,
			Used: r.Used, Amount: a.Amount, Needs: r.Needs, ResetAt: r.ResetAt, WindowStart: r.WindowStart, WindowEnd: r.WindowEnd})
		require.NoError(t, err)
		var got throttle.Refusal
		require.NoError(t, json.Unmarshal(b, &got))
		r.Deadline = time.Time{}
		require.Equal(t, r, got)
	})

	t.Run("ReadsTheOutcome010Stored", func(t *testing.T) {
		t.Parallel()
		r := refusals(t)["CalendarRefusesWithADeadline"]
		b, err := json.Marshal(struct {
			Key   string         `json:"key"`
			Spent throttle.Spent `json:"spent"`
		}{r.Limit, r.Spent}) // pgqueue.Refusal of 0.1.0
		require.NoError(t, err)
		var got throttle.Refusal
		require.NoError(t, json.Unmarshal(b, &got))
		require.Equal(t, r, got)
	})

	t.Run("ABadAllowanceIsAnErrorNamingIt", func(t *testing.T) {
		t.Parallel()
		var got throttle.Refusal
		err := json.Unmarshal([]byte(`{"limit":"tenant:free","allowance":"tokens=lots/day"}`), &got)
		require.ErrorContains(t, err, `throttle: refusal of limit "tenant:free": allowance: `)
		require.ErrorContains(t, err, "lots")
	})
}
