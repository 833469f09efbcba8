package dashboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/browsertest"
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
	limits, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('section.card[data-key="openai"] svg.chart')].map((c) => c.dataset.limitSteps)`))
	require.NoError(t, err)
	require.Equal(t, []string{"1", "1"}, limits, "each chart has its limit line, one step since the limit was created")
	waitFor(t, ctx, "labels clear of the lines", labelClear("openai"))

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

// row is the expression of a cell's text in the overview's row of key.
func row(key, col string) string {
	return `(document.querySelector('#keys tbody tr[data-key="` + key + `"] [data-col="` + col + `"]') || {}).textContent`
}

// rowKeys is the expression of the keys of the table's rows, in order, joined by spaces.
const rowKeys = `[...document.querySelectorAll('#keys tbody tr[data-key]')].map(r => r.dataset.key).join(" ")`

// The overview in a real Chromium at 300 keys: a page of 50 rows that the server sorts by a header's
// click, filters by the prefix typed and pages; a key's card opens on a click, and only then is its
// status (with its chart's data) read.
func TestDashboard_OverviewInABrowser(t *testing.T) {
	t.Parallel()
	m := newMany(t, 300)
	base := m.server(t, dashboard.Options{AllowWrites: true, Refresh: 200 * time.Millisecond})
	ctx := browsertest.New(t, 3*time.Minute)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(`#keys tbody tr[data-key="tenant:00000"]`)))
	waitFor(t, ctx, "the count", `document.getElementById("total").textContent === "300 keys"`)
	waitFor(t, ctx, "the pages", `document.getElementById("pageinfo").textContent === "page 1 of 6"`)
	waitFor(t, ctx, "a page of 50", `document.querySelectorAll('#keys tbody tr[data-key]').length === 50`)
	waitFor(t, ctx, "the paused key", row("tenant:00009", "paused")+`.startsWith("until ")`)
	waitFor(t, ctx, "a few loads", `Number(document.body.dataset.loads) >= 3`)
	statusReads := `performance.getEntriesByType("resource").map(e => e.name).filter(n => n.includes("/api/status"))`
	reads, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](statusReads))
	require.NoError(t, err)
	require.Empty(t, reads, "no card is open: no key's status or chart is read")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("section.card").length`))
	require.NoError(t, err)
	require.Zero(t, n)

	header := func(col string) string { return `#keys th[data-sort="` + col + `"] button` }
	sorted := func(col, dir string) string {
		return `document.querySelector('#keys th[data-sort="` + col + `"]').getAttribute("aria-sort") === "` + dir + `"`
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(header("queued"))))
	waitFor(t, ctx, "the longest lines first", sorted("queued", "descending")+` && `+rowKeys+`.startsWith("`+m.busiest+` tenant:00007 user:0003 tenant:00000 ")`)
	waitFor(t, ctx, "9 queued", row(m.busiest, "queued")+` === "9"`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(header("queued"))))
	waitFor(t, ctx, "the shortest first", sorted("queued", "ascending")+` && `+rowKeys+`.startsWith("tenant:00000 tenant:00001 ")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(header("oldest_wait"))))
	waitFor(t, ctx, "the longest wait first", sorted("oldest_wait", "descending")+` && `+rowKeys+`.startsWith("user:0003 tenant:00007 `+m.busiest+` ")`)
	waitFor(t, ctx, "an hour's wait", row("user:0003", "oldest_wait")+` === "1.0 h"`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(header("use"))))
	waitFor(t, ctx, "the fullest first", sorted("use", "descending")+` && `+rowKeys+`.startsWith("tenant:00100 user:0005 ")`)
	waitFor(t, ctx, "its use", row("tenant:00100", "use")+` === "100% concurrency" && `+row("tenant:00100", "inflight")+` === "2 / 2"`)

	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#prefix`, "user:000")))
	waitFor(t, ctx, "the filtered count", `document.getElementById("total").textContent === '10 keys starting with "user:000"'`)
	waitFor(t, ctx, "the filtered rows", rowKeys+` === "user:0005 user:0000 user:0001 user:0002 user:0003 user:0004 user:0006 user:0007 user:0008 user:0009"`)
	waitFor(t, ctx, "one page", `document.getElementById("pageinfo").textContent === "page 1 of 1" && document.getElementById("next").disabled`)
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("prefix").value = "", true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#prefix`, "tenant:")))
	waitFor(t, ctx, "the tenants", `document.getElementById("total").textContent === '270 keys starting with "tenant:"'`)

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(header("key"))))
	waitFor(t, ctx, "by key", sorted("key", "ascending")+` && `+rowKeys+`.startsWith("tenant:00000 tenant:00001 ")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#next`)))
	waitFor(t, ctx, "page 2", `document.getElementById("pageinfo").textContent === "page 2 of 6" && `+rowKeys+`.startsWith("tenant:00050 ")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#next`)))
	waitFor(t, ctx, "page 3", `document.getElementById("pageinfo").textContent === "page 3 of 6" && `+rowKeys+`.startsWith("tenant:00100 ")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#prev`), chromedp.Click(`#prev`)))
	waitFor(t, ctx, "page 1 again", `document.getElementById("pageinfo").textContent === "page 1 of 6" && `+rowKeys+`.startsWith("tenant:00000 ")`)
	waitFor(t, ctx, "previous disabled", `document.getElementById("prev").disabled`)

	// A click on a key opens its card, which reads that key's status alone.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#keys tbody tr[data-key="tenant:00007"] button.key`)))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`section.card[data-key="tenant:00007"]`)))
	waitFor(t, ctx, "its queue on the card", field("tenant:00007", "queued")+` === "5"`)
	waitFor(t, ctx, "its chart", `document.querySelector('section.card[data-key="tenant:00007"] svg.chart.requests path.series') !== null`)
	waitFor(t, ctx, "its row marked open", `document.querySelector('#keys tbody tr[data-key="tenant:00007"]').classList.contains("open")`)
	n, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("section.card").length`))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	reads, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](statusReads))
	require.NoError(t, err)
	require.NotEmpty(t, reads)
	for _, r := range reads {
		require.Contains(t, r, "/api/status?key=tenant%3A00007", "only the open card's key is read")
		require.NotContains(t, r, "&key=")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	browsertest.KeepScreenshot(t, "dashboard-overview.png", png)

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`section.card[data-key="tenant:00007"] button.close`)))
	waitFor(t, ctx, "the card closed", `document.querySelector("section.card") === null && document.querySelector("#cards .hint") !== null`)
}
