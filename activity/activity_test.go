package activity_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/throttle"
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

// The arguments are checked before anything else, in or outside Sluice: a bad one gets an error
// naming it, never ErrNotThrottled, so that a unit test of the activity catches it.
func TestReportChecksArgumentsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, err := range []error{
		sluiceactivity.ReportTokens(ctx, -5, 1),
		sluiceactivity.ReportUsage(ctx, -1),
		sluiceactivity.ReportAnthropicUsage(ctx, sluiceactivity.AnthropicUsage{CacheReadInputTokens: -2}),
		sluiceactivity.ReportTokens(ctx, 1<<40, 1),
	} {
		require.Error(t, err)
		require.NotErrorIs(t, err, sluiceactivity.ErrNotThrottled)
	}
	require.ErrorContains(t, sluiceactivity.ReportUsage(ctx, -1), "ReportUsage: tokens must be >= 0, got -1")
	require.ErrorContains(t, sluiceactivity.ReportAnthropicUsage(ctx, sluiceactivity.AnthropicUsage{CacheReadInputTokens: -2}),
		"CacheReadInputTokens:-2")
	require.ErrorContains(t, sluiceactivity.ReportTokens(ctx, 1<<40, 1), "at most 1099511627776 tokens, got input 1099511627776, output 1")
	require.ErrorIs(t, sluiceactivity.ReportAnthropicUsage(ctx, sluiceactivity.AnthropicUsage{InputTokens: 1}), sluiceactivity.ErrNotThrottled)
}

func TestAnthropicUsage_Counted(t *testing.T) {
	t.Parallel()
	u := sluiceactivity.AnthropicUsage{InputTokens: 50, CacheCreationInputTokens: 30, CacheReadInputTokens: 500, OutputTokens: 120}
	require.Equal(t, throttle.Cost{Input: 80, Output: 120}, u.Counted(), "cache reads do not count toward input")
	u.CacheReadsCount = true
	require.Equal(t, throttle.Cost{Input: 580, Output: 120}, u.Counted(), "for the models whose cache reads count")
}
