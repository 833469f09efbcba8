package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/browsertest"
)

// field is the expression of a figure's text on key's card.
func field(key, name string) string {
	return `(document.querySelector('section.card[data-key="` + key + `"] [data-field="` + name + `"]') || {}).textContent`
}

// waitFor waits until the page's expression is true: on every change of the page, with no deadline
// but the test's.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(0)))
	require.NoError(t, err, "waiting for %s", what)
}

// The page in a real Chromium: it draws a card per key, follows the queue as it changes without a
// reload, and, with writes allowed, changes a limit and pauses a key through its form.
func TestDashboard_InABrowser(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	_, base := l.server(t, dashboard.Options{AllowWrites: true, Refresh: 200 * time.Millisecond})
	ctx := browsertest.New(t, 3*time.Minute)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(`section.card[data-key="openai"]`)))
	waitFor(t, ctx, "4 queued", field("openai", "queued")+` === "4"`)
	waitFor(t, ctx, "2 in flight of 2", field("openai", "inflight")+` === "2 / 2"`)
	waitFor(t, ctx, "the head's reason", field("openai", "head_wait_reason")+` === "concurrency"`)

	l.enqueue(t, 5) // the page refreshes on its own
	waitFor(t, ctx, "9 queued", field("openai", "queued")+` === "9"`)

	lengths, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
		`[...document.querySelectorAll('section.card[data-key="openai"] svg.chart path.series')].map(p => p.getTotalLength())`))
	require.NoError(t, err)
	require.Len(t, lengths, 2, "a tokens chart and a requests chart")
	for _, n := range lengths {
		require.Positive(t, n, "the chart drew its line")
	}
	limits, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('section.card[data-key="openai"] svg.chart line.limit').length`))
	require.NoError(t, err)
	require.Equal(t, 2, limits, "each chart has its limit line")

	form := `form.steer[data-key="openai"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(form+`input[name="max_concurrent"]`, "1"),
		chromedp.Click(form+`button[data-action="set"]`)))
	waitFor(t, ctx, "the lowered cap", field("openai", "inflight")+` === "2 / 1"`)
	lim, err := l.q.Limit(context.Background(), "openai")
	require.NoError(t, err)
	require.Equal(t, 1, lim.MaxConcurrent, "the page changed the database")

	// An output budget (Anthropic's OTPM) set from the form gets its figure and its chart.
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(form+`input[name="output_tokens_per_minute"]`, "6000"),
		chromedp.Click(form+`button[data-action="set"]`)))
	waitFor(t, ctx, "the output tokens chart", `document.querySelector('section.card[data-key="openai"] svg.chart.output_tokens line.limit') !== null`)
	waitFor(t, ctx, "the output tokens figure", field("openai", "output_tokens_last_minute")+` !== undefined`)
	lim, err = l.q.Limit(context.Background(), "openai")
	require.NoError(t, err)
	require.Equal(t, 6000.0, lim.OutputTokensPerMinute)
	require.Equal(t, 6000.0, lim.OutputTokenBurst, "a new rate gets its default burst")
	require.Equal(t, 1, lim.MaxConcurrent, "an unchanged field is not sent")

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(form+`button[data-action="pause"]`)))
	waitFor(t, ctx, "the pause", field("openai", "state")+`.startsWith("paused")`)
	st, err := l.q.Status(context.Background(), "openai")
	require.NoError(t, err)
	require.True(t, st[0].State.PausedUntil.After(st[0].Now), "paused in the database")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(form+`button[data-action="resume"]`)))
	waitFor(t, ctx, "the resume", `!`+field("openai", "state")+`.startsWith("paused")`)

	// A refused change is shown, and changes nothing.
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(form+`input[name="requests_per_second"]`, "-2"),
		chromedp.Click(form+`button[data-action="set"]`)))
	waitFor(t, ctx, "the error", `document.getElementById("error").textContent.includes("RequestsPerSecond must be >= 0")`)
	lim, err = l.q.Limit(context.Background(), "openai")
	require.NoError(t, err)
	require.Equal(t, 5.0, lim.RequestsPerSecond)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NotEmpty(t, png)
	browsertest.KeepScreenshot(t, "dashboard.png", png)
}
