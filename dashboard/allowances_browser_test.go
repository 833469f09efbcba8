package dashboard_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/browsertest"
)

// allowanceText is the expression of the text of a part (spec, on_spent, spent, used, remaining,
// resets) of the allowance spec on key's card; undefined when there is none.
func allowanceText(key, spec, part string) string {
	return text(`section.card[data-key="` + key + `"] li.allowance[data-spec="` + spec + `"] [data-part="` + part + `"]`)
}

// The allowances in a real Chromium, on a clock standing at noon UTC: each card lists its key's
// allowances with their use, what remains, when they reset and what a ticket they have no room for
// does, a spent one marked; the ticket view says which allowance holds a ticket, that the next claim
// refuses another, and why a third was refused.
func TestDashboard_AllowancesInABrowser(t *testing.T) {
	t.Parallel()
	a := newAllowed(t)
	base := a.server(t, dashboard.Options{Refresh: 200 * time.Millisecond})
	ctx := browsertest.New(t, 3*time.Minute)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(`section.card[data-key="plan:trial"] li.allowance`)))

	// plan:trial's one allowance is spent.
	trial := func(part string) string { return allowanceText("plan:trial", "usd=0.10/day", part) }
	for _, c := range []struct{ part, want string }{
		{"spec", "usd=0.10/day"},
		{"on_spent", "on spent: refuse"},
		{"spent", "spent"},
		{"used", "used 0.10 USD of 0.10 USD"},
		{"remaining", "0.00 USD left"},
		{"resets", "resets 2026-03-03 00:00:00 UTC (in 12h)"},
	} {
		waitFor(t, ctx, "plan:trial's "+c.part, trial(c.part)+` === "`+c.want+`"`)
	}
	mark, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const li = document.querySelector('section.card[data-key="plan:trial"] li.allowance');
		return [li.className, li.querySelector(".bar .fill").style.width, li.querySelector(".bar").getAttribute("aria-valuenow")];
	})()`))
	require.NoError(t, err)
	require.Equal(t, []string{"allowance spent", "100%", "100000"}, mark, "the spent one marked, its bar full")
	waitFor(t, ctx, "the history names the allowance set", `[...document.querySelectorAll('section.card[data-key="plan:trial"] .history li')]`+
		`.some((li) => li.textContent.includes("allowances: none → usd=0.10/day (refuse)"))`)

	waitFor(t, ctx, "and plan:free's three", `[...document.querySelectorAll('section.card[data-key="plan:free"] .history li')]`+
		`.some((li) => li.textContent.includes("allowances: none → usd=0.50/day (wait), `+
		`allowances: none → tokens=50000/day@America/Los_Angeles (wait), allowances: none → requests=100/24h (wait)"))`)

	// plan:free's three: dollars a day in UTC, tokens a day in Los Angeles, requests in any 24 hours.
	free := func(spec, part string) string { return allowanceText("plan:free", spec, part) }
	for _, c := range []struct{ spec, part, want string }{
		{"usd=0.50/day", "used", "used 0.25 USD of 0.50 USD"},
		{"usd=0.50/day", "remaining", "0.25 USD left"},
		{"usd=0.50/day", "on_spent", "on spent: wait"},
		{"tokens=50000/day@America/Los_Angeles", "used", "used 20,000 tokens of 50,000 tokens"},
		{"tokens=50000/day@America/Los_Angeles", "remaining", "30,000 tokens left"},
		{"tokens=50000/day@America/Los_Angeles", "resets", "resets 2026-03-03 08:00:00 UTC (in 20h, 2026-03-03 00:00 America/Los_Angeles)"},
		{"requests=100/24h", "used", "used 1 request of 100 requests"},
		{"requests=100/24h", "resets", "all back 2026-03-03 13:00:00 UTC (in 1d 1h)"},
	} {
		waitFor(t, ctx, "plan:free's "+c.spec+" "+c.part, free(c.spec, c.part)+` === "`+c.want+`"`)
	}
	spent, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('section.card[data-key="plan:free"] li.allowance.spent, section.card[data-key="plan:free"] [data-part="spent"]').length`))
	require.NoError(t, err)
	require.Zero(t, spent, "none of plan:free's is spent")
	none, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('section.card[data-key="llm"] .allowances') === null`))
	require.NoError(t, err)
	require.True(t, none, "a key without allowances shows none")
	card, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('section.card[data-key="plan:free"] .allowances').innerText`))
	require.NoError(t, err)
	t.Logf("plan:free's card:\n%s", card)
	card, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('section.card[data-key="plan:trial"] .allowances').innerText`))
	require.NoError(t, err)
	t.Logf("plan:trial's card:\n%s", card)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	browsertest.KeepScreenshot(t, "dashboard-allowances.png", png)

	// The ticket waiting for the day's dollars.
	find := func(wf string) string {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("find-workflow").value = "", true)`))
		require.NoError(t, err)
		require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, wf), chromedp.Click(`#find button[type="submit"]`)))
		article := `#explained article.explain[data-ticket="` + strconv.FormatInt(a.ids[wf], 10) + `"] `
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(article+`[data-field="holds"]`)))
		return article
	}
	article := find("free-2")
	holds := "Waits for allowance usd=0.50/day of plan:free: used 0.25 USD of 0.50 USD, needs 0.30 USD; resets 2026-03-03 00:00:00 UTC (in 12h0m0s)."
	waitFor(t, ctx, "what holds it", text(article+`[data-field="holds"]`)+` === "`+holds+`"`)
	waitFor(t, ctx, "no refusal", `document.querySelector('`+article+`[data-field="refused"]') === null`)
	waitFor(t, ctx, "the allowance that refuses", text(article+`table.limits tr[data-key="plan:free"] [data-col="room"]`)+` === "allowance"`)
	figures, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`table.limits tr[data-key="plan:free"] [data-col="figures"]`)))
	require.NoError(t, err)
	require.Equal(t, "usd=0.50/day: used 0.25 USD of 0.50 USD, needs 0.30 USD, resets 2026-03-03 00:00:00 UTC · "+
		"tokens=50000/day@America/Los_Angeles: used 20,000 tokens of 50,000 tokens, needs 1,000 tokens · "+
		"requests=100/24h: used 1 request of 100 requests, needs 1 request", figures)
	logText(t, ctx, "free-2", article+`[data-field="holds"]`)
	requireServerWords(t, ctx, base, a.ids["free-2"], article, true)

	// The ticket the next claim refuses.
	article = find("trial-3")
	refused := "It will be refused: allowance usd=0.10/day of plan:trial: used 0.10 USD of 0.10 USD, needs 0.05 USD; " +
		"resets 2026-03-03 00:00:00 UTC (in 12h0m0s); the next claim fails its activity (the allowance refuses when spent)."
	waitFor(t, ctx, "the refusal to come", text(article+`[data-field="refused"]`)+` === "`+refused+`"`)
	waitFor(t, ctx, "no admission expected", text(article+`[data-field="estimate"]`)+` === "none: the next claim refuses it"`)
	waitFor(t, ctx, "the spent allowance in the figures", text(article+`table.limits tr[data-key="plan:trial"] [data-col="figures"]`)+
		` === "usd=0.10/day: used 0.10 USD of 0.10 USD, needs 0.05 USD, resets 2026-03-03 00:00:00 UTC"`)
	logText(t, ctx, "trial-3", article+`[data-field="holds"]`)
	logText(t, ctx, "trial-3", article+`[data-field="refused"]`)
	requireServerWords(t, ctx, base, a.ids["trial-3"], article, true)

	// The ticket a claim refused.
	article = find("trial-2")
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`[data-field="holds"]`)))
	require.NoError(t, err)
	require.Equal(t, "Refused at 2026-03-02 12:00:00 UTC, never admitted: allowance usd=0.10/day of plan:trial was spent: used 0.10 USD of "+
		"0.10 USD, the call needed 0.05 USD; it resets at 2026-03-03 00:00:00 UTC; the refusal waits to be delivered to Temporal.", got)
	t.Logf("trial-2: %s", got)
	png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	browsertest.KeepScreenshot(t, "dashboard-allowance-ticket.png", png)
}

// logText logs the text of the first element selector matches, as the page shows it.
func logText(t *testing.T, ctx context.Context, what, selector string) {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(selector)))
	require.NoError(t, err)
	t.Logf("%s: %s", what, s)
}
