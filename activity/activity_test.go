package activity_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sluiceactivity "github.com/sluicehq/sluice/activity"
)

func TestOutsideSluice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.ErrorIs(t, sluiceactivity.ReportUsage(ctx, 10), sluiceactivity.ErrNotThrottled)
	require.ErrorIs(t, sluiceactivity.ReportTokens(ctx, 1, 2), sluiceactivity.ErrNotThrottled)
	require.ErrorIs(t, sluiceactivity.ReportHeaders(ctx, http.Header{}), sluiceactivity.ErrNotThrottled)
	_, ok := sluiceactivity.Admission(ctx)
	require.False(t, ok)

	h := http.Header{}
	h.Set("Retry-After", "7")
	// RetryAfter is read from the clock inside the call: it lies between the instants around it.
	between := func(t *testing.T, before, after time.Time, d time.Duration, got time.Time) {
		t.Helper()
		require.False(t, got.Before(before.Add(d)), "%s is before %s", got, before.Add(d))
		require.False(t, got.After(after.Add(d)), "%s is after %s", got, after.Add(d))
	}
	before := time.Now()
	err := sluiceactivity.RateLimited(ctx, h)
	after := time.Now()
	var te *sluiceactivity.ThrottledError
	require.True(t, errors.As(err, &te), "an ordinary error Temporal retries as usual")
	between(t, before, after, 7*time.Second, te.RetryAfter)
	require.Empty(t, te.Key)

	before = time.Now()
	err = sluiceactivity.RateLimited(ctx, nil)
	after = time.Now()
	require.True(t, errors.As(err, &te))
	between(t, before, after, sluiceactivity.DefaultRetryAfter, te.RetryAfter)
}

func TestReportRejectsNegativeUsage(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, sluiceactivity.ReportTokens(context.Background(), -1, 5), "got input -1, output 5")
}
