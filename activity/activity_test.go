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
	before := time.Now()
	err := sluiceactivity.RateLimited(ctx, h)
	var te *sluiceactivity.ThrottledError
	require.True(t, errors.As(err, &te), "an ordinary error Temporal retries as usual")
	require.WithinDuration(t, before.Add(7*time.Second), te.RetryAfter, time.Second)
	require.Empty(t, te.Key)

	err = sluiceactivity.RateLimited(ctx, nil)
	require.True(t, errors.As(err, &te))
	require.WithinDuration(t, before.Add(sluiceactivity.DefaultRetryAfter), te.RetryAfter, time.Second)
}

func TestReportRejectsNegativeUsage(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, sluiceactivity.ReportTokens(context.Background(), -1, 5), "got input -1, output 5")
}
