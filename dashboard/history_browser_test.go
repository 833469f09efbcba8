package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/browsertest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// chartOf is the expression of key's chart of class cls.
func chartOf(key, cls string) string {
	return `document.querySelector('section.card[data-key="` + key + `"] svg.chart.` + cls + `')`
}

// labelClear is the expression that the limit's label of every chart of key's card overlaps none of
// its limit line's segments.
func labelClear(key string) string {
	return `[...document.querySelectorAll('section.card[data-key="` + key + `"] svg.chart')].every((svg) => {
		const t = svg.querySelector("text.limit-label");
		if (!t) return false;
		const b = t.getBBox();
		return [...svg.querySelectorAll("line.limit")].every((l) => {
			const y = Number(l.getAttribute("y1")), x1 = Number(l.getAttribute("x1")), x2 = Number(l.getAttribute("x2"));
			return x2 < b.x || x1 > b.x + b.width || y < b.y - 0.5 || y > b.y + b.height + 0.5;
		});
	})`
}

// The charts draw the limit as it stood at each moment, from the limit history: a step where the
// rate was changed, a first-minute burst inside the shaded burst band above the line rather than over
// a bare line, and the label clear of the line; the card lists the changes with who made them.
func TestDashboard_LimitHistoryInABrowser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := testdb.Engine(t, pgqueue.Options{})
	// Changes made minutes ago: a queue whose clock is set back records them then.
	ago := func(d time.Duration) *pgqueue.Queue {
		q, err := pgqueue.New(e.Pool(), pgqueue.Options{Schema: e.Schema(), Now: func() time.Time { return time.Now().Add(-d) }})
		require.NoError(t, err)
		return q
	}
	alice := pgqueue.WithChangedBy(ctx, "alice@ops (sluice limits set)")
	require.NoError(t, ago(8*time.Minute).UpsertLimits(alice, throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000}))
	_, err := ago(4*time.Minute).ChangeLimit(alice, "openai", throttle.LimitChange{RequestsPerSecond: ptr(5.0)}, false)
	require.NoError(t, err)
	// Two minutes ago, a full token bucket went out in one 10 s step: 80,000 tokens, 480,000 a minute
	// against 90,000.
	_, err = e.Pool().Exec(ctx, `INSERT INTO `+pgx.Identifier{e.Schema(), "sluice_usage"}.Sanitize()+` (key, second, requests, tokens)
		VALUES ('openai', date_trunc('second', clock_timestamp()) - interval '2 minutes', 20, 80000)`)
	require.NoError(t, err)

	l := live{e: e, q: adminOf(t, e, pgqueue.Options{})}
	_, base := l.server(t, dashboard.Options{AllowWrites: true, Refresh: 200 * time.Millisecond})
	bctx := browsertest.New(t, 3*time.Minute)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(base), chromedp.WaitVisible(`section.card[data-key="openai"]`)))
	waitFor(t, bctx, "the requests chart's two steps", chartOf("openai", "requests")+`?.dataset.limitSteps === "2"`)
	rates, err := chromedp.Run(bctx, chromedp.Evaluate[[]float64](
		`[...`+chartOf("openai", "requests")+`.querySelectorAll("line.limit")].map((l) => Number(l.dataset.rate))`))
	require.NoError(t, err)
	require.Equal(t, []float64{10, 5}, rates, "10/s, then 5/s since the change")
	waitFor(t, bctx, "the rise between them", chartOf("openai", "requests")+`.querySelector("line.limit-rise") !== null`)
	waitFor(t, bctx, "one step for tokens", chartOf("openai", "tokens")+`.dataset.limitSteps === "1"`)
	waitFor(t, bctx, "the label of today's rate", chartOf("openai", "requests")+`.querySelector("text.limit-label").textContent === "limit 5"`)
	waitFor(t, bctx, "labels clear of the lines", labelClear("openai"))

	// The burst: its point is inside the band, above the line.
	waitFor(t, bctx, "the burst band and its label", chartOf("openai", "tokens")+`.querySelector("rect.burst") !== null && `+
		chartOf("openai", "tokens")+`.querySelector("text.burst-label")?.textContent === "burst"`)
	inBand, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
		const svg = `+chartOf("openai", "tokens")+`, band = svg.querySelector("rect.burst").getBBox();
		const peak = svg.querySelector("path.series").getBBox().y, line = Number(svg.querySelector("line.limit").getAttribute("y1"));
		return peak >= band.y && peak < line;
	})()`))
	require.NoError(t, err)
	require.True(t, inBand, "480,000 a minute for one step is within the burst, drawn as such")

	list := `[...document.querySelectorAll('section.card[data-key="openai"] .history li')].map((li) => li.textContent)`
	waitFor(t, bctx, "the changes, newest first", list+`.length === 2 && `+list+`[0].includes("configured by alice@ops (sluice limits set): requests_per_second: 10 → 5, burst: 10 → 5")`)

	form := `form.steer[data-key="openai"] `
	require.NoError(t, chromedp.Do(bctx, chromedp.SetValue(form+`input[name="requests_per_second"]`, "8"),
		chromedp.Click(form+`button[data-action="set"]`)))
	waitFor(t, bctx, "a third step", chartOf("openai", "requests")+`?.dataset.limitSteps === "3"`)
	waitFor(t, bctx, "the page's change listed", list+`[0].includes("by dashboard 127.0.0.1:") && `+list+`[0].includes("requests_per_second: 5 → 8")`)
	waitFor(t, bctx, "labels still clear", labelClear("openai"))

	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	browsertest.KeepScreenshot(t, "dashboard-history.png", png)
}

func ptr[T any](v T) *T { return &v }
