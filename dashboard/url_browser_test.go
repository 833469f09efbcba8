package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/browsertest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// stoppedClock is a clock that moves only when told.
type stoppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stoppedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *stoppedClock) Add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// overdue is a schema on a stopped clock, at 2026-03-02 12:01:01 UTC: tenant:acme (1 slot) ran one
// ticket for a second, and has held its slot for a minute with another (long, its deadline an hour
// after its admission): overdue. Two tickets of openai's line wait for acme (waiting); after them in
// that line waits mine, on tenant:b, which the next claim admits, the two held back elsewhere; and
// acme, alone in acme's line, waits for the long one: by its deadline at the latest, likely 2 s.
type overdue struct {
	q                  *pgqueue.Queue
	long, mine, acme   int64
	waiting            [2]int64
	deadline, admitted time.Time
}

func newOverdue(t *testing.T) overdue {
	t.Helper()
	ctx := context.Background()
	clock := &stoppedClock{t: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)}
	q := testdb.Engine(t, pgqueue.Options{Now: clock.Now})
	require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 10}, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
		throttle.Limit{Key: "tenant:b", MaxConcurrent: 1}))
	enqueue := func(wf string, deadline time.Time, keys ...string) int64 {
		tk, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: keys, Owner: "worker-a", Namespace: "default", WorkflowID: wf,
			ActivityID: "1", ActivityType: "Summarize", Attempt: 1, Deadline: deadline})
		require.NoError(t, err)
		return tk.ID
	}
	claimOne := func(id int64) {
		res, err := q.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
		require.NoError(t, err)
		require.Len(t, res.Admitted, 1)
		require.Equal(t, id, res.Admitted[0].ID)
	}
	first := enqueue("first", time.Time{}, "openai", "tenant:acme")
	claimOne(first)
	clock.Add(time.Second)
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: first, ActualCost: -1, OutcomeKind: pgqueue.OutcomeCompleted}))
	o := overdue{q: adminOf(t, q, pgqueue.Options{Now: clock.Now}), admitted: clock.Now(), deadline: clock.Now().Add(time.Hour)}
	o.long = enqueue("long", o.deadline, "openai", "tenant:acme")
	claimOne(o.long)
	o.waiting[0] = enqueue("waiting-1", time.Time{}, "openai", "tenant:acme")
	o.waiting[1] = enqueue("waiting-2", time.Time{}, "openai", "tenant:acme")
	o.mine = enqueue("mine", time.Time{}, "openai", "tenant:b")
	clock.Add(time.Minute)
	o.acme = enqueue("acme", time.Time{}, "tenant:acme")
	return o
}

func (o overdue) server(t *testing.T) string {
	t.Helper()
	d, err := dashboard.New(o.q, dashboard.Options{Refresh: 200 * time.Millisecond})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", d))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/sluice/"
}

// The page keeps what it shows in its URL: a link opens the cards, the waiting list and the ticket it
// names; a click adds to the history, and back and forward show again what was shown. A failed search
// clears the explanation shown before it. The explanation gives the estimator's likely range, the
// holders that ran longer than every recent run, and the tickets other limits hold back, in the
// words of sluice explain.
func TestDashboard_URLStateInABrowser(t *testing.T) {
	t.Parallel()
	o := newOverdue(t)
	base := o.server(t)
	ctx := browsertest.New(t, 3*time.Minute)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	search := `location.search`
	explains := func(n int64) string {
		return `document.querySelector('#explained article.explain[data-ticket="` + id(n) + `"]') !== null && !document.getElementById("explained").hidden`
	}

	// A link to acme's card, its waiting list and the ticket acme.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"?key=tenant%3Aacme&list=tenant%3Aacme&ticket="+id(o.acme))))
	waitFor(t, ctx, "the card it names", `document.querySelector('section.card[data-key="tenant:acme"]') !== null`)
	waitFor(t, ctx, "the list it names", text(`#ticketlist h2`)+` === "tenant:acme: 3 waiting, 1 admitted or running"`)
	waitFor(t, ctx, "the ticket it names", explains(o.acme))
	waitFor(t, ctx, "a few loads", `Number(document.body.dataset.loads) >= 2`)
	cards, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("section.card").length`))
	require.NoError(t, err)
	require.Equal(t, 1, cards, "the card the URL names only: 3 keys open every card when the URL names none")

	article := `#explained article.explain[data-ticket="` + id(o.acme) + `"] `
	estimate, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`[data-field="estimate"]`)))
	require.NoError(t, err)
	require.Equal(t, "in 59m2s (at 13:00:03 UTC) (likely 2s to 59m2s, as recent runs vary)", estimate,
		"by the long one's deadline at the latest; likely 2 s, as the one run before it")
	holds, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`[data-field="holds"]`)))
	require.NoError(t, err)
	require.Equal(t, "Waits for concurrency of tenant:acme (1/1 in flight); 2 tickets ahead of it there; 1 ticket holding it has been running "+
		"since 12:00:01 UTC (1m0s), longer than any recent run, so it is expected to end by its deadline at the latest.", holds)
	overdueNote, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`table.limits tr[data-key="tenant:acme"] [data-field="overdue"]`)))
	require.NoError(t, err)
	require.Equal(t, "1 ticket holding it has been running since 12:00:01 UTC (1m0s), longer than any recent run, so it is expected to end by "+
		"its deadline at the latest", overdueNote)
	ready, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(article+`table.limits tr[data-key="tenant:acme"] [data-col="ready"]`)))
	require.NoError(t, err)
	require.Regexp(t, `^in 59m2s \(at 13:00:03 UTC\) \(likely 2s to 59m2s, as recent runs vary\)1 ticket holding it`, ready)
	requireServerWords(t, ctx, base, o.acme, article, true) // on a stopped clock, to the letter

	// A click on another ticket adds it to the history; back and forward show either again.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#ticketlist button.ticket[data-ticket="`+id(o.waiting[0])+`"]`)))
	waitFor(t, ctx, "the ticket clicked", explains(o.waiting[0]))
	waitFor(t, ctx, "in the URL", search+` === "?key=tenant%3Aacme&list=tenant%3Aacme&ticket=`+id(o.waiting[0])+`"`)
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateBack()))
	waitFor(t, ctx, "the ticket before, back", explains(o.acme)+` && `+search+`.endsWith("ticket=`+id(o.acme)+`")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateForward()))
	waitFor(t, ctx, "the ticket clicked, forward", explains(o.waiting[0]))

	// A search: mine waits for nothing; the two before it in openai's line are held by acme.
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, "mine"), chromedp.Click(`#find button[type="submit"]`)))
	waitFor(t, ctx, "the ticket found", explains(o.mine))
	waitFor(t, ctx, "the search in the URL", search+` === "?key=tenant%3Aacme&list=tenant%3Aacme&workflow=mine"`)
	mine := `#explained article.explain[data-ticket="` + id(o.mine) + `"] `
	waitFor(t, ctx, "the tickets held elsewhere", text(mine+`table.limits tr[data-key="openai"] [data-col="ahead"]`)+` === "0 +2 held elsewhere"`)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](text(mine+`[data-field="holds"]`)))
	require.NoError(t, err)
	require.Equal(t, "Nothing holds it: every limit has room, and the 2 tickets before it in openai wait for other limits; the next claim admits it.", got)
	requireServerWords(t, ctx, base, o.mine, mine, true)

	// A failed search clears the explanation shown: it is not the answer.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.getElementById("find-workflow").value = "", true)`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#find-workflow`, "nope"), chromedp.Click(`#find button[type="submit"]`)))
	waitFor(t, ctx, "the error", text(`#ticket-error`)+`.startsWith('workflow nope: no ticket of workflow "nope"')`)
	waitFor(t, ctx, "no explanation under it", `document.getElementById("explained").hidden && document.querySelector("#explained article") === null`)

	// Back: the search before, found again; a reload of its URL shows the same.
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateBack()))
	waitFor(t, ctx, "the search before", explains(o.mine)+` && document.getElementById("find-workflow").value === "mine"`)
	waitFor(t, ctx, "the error gone", text(`#ticket-error`)+` === ""`)
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(loc)))
	waitFor(t, ctx, "the search, reloaded", explains(o.mine)+` && document.getElementById("find-workflow").value === "mine"`)
	waitFor(t, ctx, "the list, reloaded", text(`#ticketlist h2`)+` === "tenant:acme: 3 waiting, 1 admitted or running"`)
	waitFor(t, ctx, "the card, reloaded", `document.querySelector('section.card[data-key="tenant:acme"]') !== null`)

	// The table's order and the cards: a click adds to the history, back undoes it.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#keys th[data-sort="queued"] button`)))
	waitFor(t, ctx, "the order in the URL", search+`.includes("sort=queued")`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#keys tbody tr[data-key="openai"] button.key`)))
	waitFor(t, ctx, "the card opened", `document.querySelector('section.card[data-key="openai"]') !== null && `+
		`new URLSearchParams(location.search).getAll("key").join(" ") === "tenant:acme openai"`)
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateBack()))
	waitFor(t, ctx, "the card closed, back", `document.querySelector('section.card[data-key="openai"]') === null`)
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateBack()))
	waitFor(t, ctx, "the order before, back", `document.querySelector('#keys th[data-sort="key"]').getAttribute("aria-sort") === "ascending"`)
}
