package activity_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/internal/testkit/v010"
	"github.com/sluicehq/sluice/throttle"
)

// viaTemporal is err as a workflow receives it: through Temporal's failure converter, its detail
// encoded as a payload and decoded on demand.
func viaTemporal(err error) error {
	fc := temporal.GetDefaultFailureConverter()
	return fc.FailureToError(fc.ErrorToFailure(err))
}

func TestNewAllowanceSpentError(t *testing.T) {
	t.Parallel()
	a, err := throttle.ParseAllowance("usd=5.00/day@America/Los_Angeles")
	require.NoError(t, err)
	a.OnSpent = throttle.OnSpentRefuse
	start := time.Date(2026, 2, 10, 8, 0, 0, 0, time.UTC)
	reset := start.Add(24 * time.Hour)
	s := throttle.Spent{Allowance: a, Used: 4_950_000, Needs: 85_000, WindowStart: start, WindowEnd: reset, ResetAt: reset,
		Deadline: reset.Add(-time.Hour)}
	err = viaTemporal(sluiceactivity.NewAllowanceSpentError("tenant:team", s))

	t.Run("TheDetailIsTheRefusal", func(t *testing.T) {
		t.Parallel()
		got, ok := sluiceactivity.AsAllowanceSpent(err)
		require.True(t, ok)
		require.Equal(t, sluiceactivity.AllowanceSpent{Limit: "tenant:team", Spent: s}, got)
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		require.Equal(t, "sluice: limit tenant:team: allowance usd=5.00/day@America/Los_Angeles spent: used 4.95 USD of 5.00 USD, the "+
			"call needs 0.085 USD; resets at 2026-02-11T08:00:00Z (2026-02-11 00:00 PST)", appErr.Message())
		require.Equal(t, got.Error(), appErr.Message())
	})

	t.Run("AWorkflowOf010DecodesTheDetail", func(t *testing.T) {
		t.Parallel()
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr)
		var old v010.AllowanceSpent
		require.NoError(t, appErr.Details(&old))
		require.Equal(t, v010.AllowanceSpent{Limit: "tenant:team", Allowance: "usd=5.00/day@America/Los_Angeles", Meter: throttle.MeterMoney,
			Currency: "USD", Used: 4_950_000, Amount: 5_000_000, Needs: 85_000, ResetAt: reset, WindowStart: start, WindowEnd: reset}, old)
	})

	t.Run("ReadsTheDetailAReplicaOf010Sent", func(t *testing.T) {
		t.Parallel()
		old := v010.AllowanceSpent{Limit: "tenant:team", Allowance: "usd=5.00/day@America/Los_Angeles", Meter: throttle.MeterMoney,
			Currency: "USD", Used: 4_950_000, Amount: 5_000_000, Needs: 85_000, ResetAt: reset, WindowStart: start, WindowEnd: reset}
		err := viaTemporal(temporal.NewNonRetryableApplicationError("sluice: limit tenant:team: ...", sluiceactivity.ErrTypeAllowanceSpent, nil, old))
		got, ok := sluiceactivity.AsAllowanceSpent(err)
		require.True(t, ok)
		want := s
		want.Allowance.OnSpent, want.Deadline = "", time.Time{} // 0.1.0 did not send them
		require.Equal(t, sluiceactivity.AllowanceSpent{Limit: "tenant:team", Spent: want}, got)
	})

	t.Run("AnotherFailureIsNot", func(t *testing.T) {
		t.Parallel()
		_, ok := sluiceactivity.AsAllowanceSpent(viaTemporal(errors.New("connection reset")))
		require.False(t, ok)
	})
}
