package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/browsertest"
)

// text is the expression of the text of the first element selector matches, undefined when none.
func text(selector string) string {
	return `(document.querySelector(` + strconv.Quote(selector) + `) || {}).textContent`
}

// The ticket view in a real Chromium: from the tenant's card, its waiting list, waiting first; a click
// on a ticket held by the tenant cap behind a provider with room opens its explanation, which names
// the tenant and its concurrency, shows its place and expected admission and links to the workflow in
// Temporal's UI. The search box finds a ticket by workflow ID.
func TestDashboard_TicketViewInABrowser(t *testing.T) {
	t.Parallel()
	h := newHeld(t)
	base := h.server(t, dashboard.Options{Refresh: 200 * time.Millisecond, TemporalUIURL: temporalUI})
	ctx := browsertest.New(t, 3*time.Minute)
	id := func(i int) string { return strconv.FormatInt(h.ids[i], 10) }
	card := `section.card[data-key="tenant:acme"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(card+`button.waiting-list`)))
	waitFor(t, ctx, "a few refreshes of the cards", `Number(document.body.dataset.loads) >= 2`)
	waitFor(t, ctx, "the tenant's card counts what it holds in openai's line", field("tenant:acme", "queued")+` === "0 (+2 in other lines)"`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(card+`button.waiting-list`)))

	// The waiting list: the two waiting first, in order, then the one running.
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`#ticketlist tr[data-ticket="`+id(2)+`"]`)))
	waitFor(t, ctx, "the order", `[...document.querySelectorAll("#ticketlist tbody tr")].map(r => r.dataset.ticket).join(" ") === "`+id(1)+` `+id(2)+` `+id(0)+`"`)
	row := func(i int, col string) string {
		return text(`#ticketlist tr[data-ticket="` + id(i) + `"] [data-col="` + col + `"]`)
	}
	waitFor(t, ctx, "the title", text(`#ticketlist h2`)+` === "tenant:acme: 2 waiting, 1 admitted or running"`)
	for _, c := range []struct {
		i          int
		col, value string
	}{
		{1, "place", "1"}, {2, "place", "2"}, {0, "place", "–"},
		{2, "workflow", h.workflows[2]}, {2, "activity_type", "Summarize"}, {2, "cost", "300 in + 200 out"},
		{1, "holds", "concurrency of tenant:acme"}, {2, "holds", "concurrency of tenant:acme"}, {0, "holds", "running"},
	} {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](row(c.i, c.col)))
		require.NoError(t, err)
		require.Equal(t, c.value, got, "ticket %d, %s", c.i, c.col)
	}
	waited, err := chromedp.Run(ctx, chromedp.Evaluate[string](row(2, "waited")))
	require.NoError(t, err)
	require.Regexp(t, `^\d+\.\d (s|min)$`, waited, "a slow machine may take a minute to get here")
	tags, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#tickets b").length`))
	require.NoError(t, err)
	require.Zero(t, tags, "a workflow ID is text, never markup")

	// The explanation of the second in line.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#ticketlist button.ticket[data-ticket="`+id(2)+`"]`)))
	article := `#explained article.explain[data-ticket="` + id(2) + `"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(article+`[data-field="holds"]`)))
	waitFor(t, ctx, "the row marked", `document.querySelector('#ticketlist tr[data-ticket="`+id(2)+`"]').classList.contains("selected")`)
	field := func(name string) string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`[data-field="`+name+`"]`)))
		require.NoError(t, err)
		return s
	}
	// The words of sluice explain, as the server makes them: the page lays them out and adds nothing.
	// The running holder is overdue once it has run longer than the one run before it (which took
	// milliseconds), as it may have by now on a real clock.
	require.Regexp(t, `^Waits for concurrency of tenant:acme \(1/1 in flight\); 1 ticket ahead of it there; `+
		`(1 ticket holding it has been running since [-\d ]*[:\d]+ UTC \([^)]+\), longer than any recent run, so it is expected to end by its deadline at the latest; )?`+
		`other limits hold back 1 ticket before it in openai: it does not wait for them\.$`, field("holds"))
	requireServerWords(t, ctx, base, h.ids[2], article, false)
	require.Equal(t, "2 in line openai", field("place"))
	require.Equal(t, "300 in + 200 out", field("cost"))
	// Two runs of the slot's holder away; pgqueue times a run by the pace of the limit's last
	// admissions, over as long as the machine took to get here: seconds, minutes or hours.
	require.Regexp(t, `^in [\dhms]+ \(at (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC\)`, field("estimate"), "an expected admission")
	for _, c := range []struct{ key, col, value string }{
		{"openai", "room", "yes"},
		{"tenant:acme", "room", "concurrency"},
		{"openai", "key", "openai (its line)"},
		{"tenant:acme", "figures", "concurrency 1/1"},
		{"tenant:acme", "ahead", "1 (300 in + 200 out)"},
		{"openai", "ahead", "0 +1 held elsewhere"},
	} {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`table.limits tr[data-key="`+c.key+`"] [data-col="`+c.col+`"]`)))
		require.NoError(t, err)
		require.Equal(t, c.value, got, "%s %s", c.key, c.col)
	}
	waitFor(t, ctx, "openai ready now", text(article+`table.limits tr[data-key="openai"] [data-col="ready"] [data-field="ready"]`)+` === "now"`)
	figures, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`table.limits tr[data-key="openai"] [data-col="figures"]`)))
	require.NoError(t, err)
	require.Regexp(t, `^concurrency 1/20 · tokens: has [\d,.]+, needs 500, \+1,500/s$`, figures)
	binds, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+article+`table.limits tr.binds').dataset.key`))
	require.NoError(t, err)
	require.Equal(t, "tenant:acme", binds)
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('`+article+`a.temporal').getAttribute("href")`))
	require.NoError(t, err)
	require.Equal(t, "http://localhost:8233/namespaces/default/workflows/order%2F3%20%3Cb%3E%C3%BC%3C%2Fb%3E/run-3/history", href)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	browsertest.KeepScreenshot(t, "dashboard-ticket.png", png)

	// The search box: the head of the line, found by its workflow ID.
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, h.workflows[1]), chromedp.Click(`#find button[type="submit"]`)))
	found := `#explained article.explain[data-ticket="` + id(1) + `"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(found+`[data-field="holds"]`)))
	waitFor(t, ctx, "its place", text(found+`[data-field="place"]`)+` === "1 in line openai"`)
	waitFor(t, ctx, "the title", text(`#explained h2`)+` === "Workflow order-2: 1 ticket"`)
	waitFor(t, ctx, "no row marked", `document.querySelector("#ticketlist tr.selected") === null`)

	// The running ticket: nothing to wait for, and no link (it was written without its run ID).
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("find-workflow").value = "", true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, h.workflows[0]), chromedp.Click(`#find button[type="submit"]`)))
	running := `#explained article.explain[data-ticket="` + id(0) + `"] `
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(running+`[data-field="holds"]`)))
	waitFor(t, ctx, "its state", text(running+`[data-field="holds"]`)+`.startsWith("Admitted at ")`)
	requireServerWords(t, ctx, base, h.ids[0], running, false)
	waitFor(t, ctx, "no link", `document.querySelector('`+running+`a.temporal') === null`)

	// A workflow with no ticket is said so, and the explanation shown before is cleared.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("find-workflow").value = "", true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, "nope"), chromedp.Click(`#find button[type="submit"]`)))
	waitFor(t, ctx, "the error", text(`#ticket-error`)+`.startsWith('workflow nope: no ticket of workflow "nope"')`)
	waitFor(t, ctx, "no explanation", `document.getElementById("explained").hidden && document.querySelector("#explained article") === null`)

	// Closed, the views go; the list opens again from the card.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#ticketlist button[data-action="close"]`)))
	waitFor(t, ctx, "both closed", `document.getElementById("explained").hidden && document.getElementById("ticketlist").hidden`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(card+`button.waiting-list`), chromedp.WaitVisible(`#ticketlist tr[data-ticket="`+id(2)+`"]`)))
}

// requireServerWords asserts that the explanation of ticket id the page shows in article is in the
// server's words (api/explain's words): each sentence as served, capitalised and with a period; the
// expected admission and each limit's room, figures, tickets ahead, ready time and overdue holders as
// served. The explanation is read again: on a stopped clock (exact) it is the page's to the letter;
// on a real one, what moves with the clock (how long ago, in how long, a bucket's level) is compared
// up to its figures.
func requireServerWords(t *testing.T, ctx context.Context, base string, id int64, article string, exact bool) {
	t.Helper()
	var ex dashboard.Explained
	code, body := getAnswer(t, base+"api/explain?id="+strconv.FormatInt(id, 10), &ex)
	require.Equal(t, http.StatusOK, code, body)
	w := ex.Tickets[0].Words
	figures := regexp.MustCompile(`\d[\dhmsµ.,]*`)
	same := func(what, want, selector string) {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+selector)))
		require.NoError(t, err)
		if !exact {
			want, got = figures.ReplaceAllString(want, "N"), figures.ReplaceAllString(got, "N")
		}
		require.Equal(t, want, got, "%s: the page shows the server's words", what)
	}
	sentence := func(s string) string { return strings.ToUpper(s[:1]) + s[1:] + "." }
	if w.State != "" {
		same("state", sentence(w.State), `[data-field="holds"]`)
		return
	}
	same("holds", sentence(w.Holds), `[data-field="holds"]`)
	same("expected", w.Expected, `[data-field="estimate"]`)
	same("cost", w.Cost, `[data-field="cost"]`)
	for _, l := range w.Limits {
		row := `table.limits tr[data-key="` + l.Key + `"] `
		same(l.Key+" room", l.Room, row+`[data-col="room"]`)
		same(l.Key+" figures", l.Figures, row+`[data-col="figures"]`)
		same(l.Key+" ahead", l.Ahead, row+`[data-col="ahead"]`)
		same(l.Key+" ready", l.Ready, row+`[data-field="ready"]`)
		if l.Overdue != "" {
			same(l.Key+" overdue", strings.ToUpper(l.Overdue[:1])+l.Overdue[1:], row+`[data-field="overdue"]`)
		}
	}
}
