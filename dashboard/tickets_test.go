package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// temporalUI is the link template of the tests: Temporal's dev server's UI.
const temporalUI = "http://localhost:8233/namespaces/{namespace}/workflows/{workflow_id}/{run_id}/history"

// held is a schema with a ticket held by a tenant cap behind a provider with room: three tickets
// drawing on openai (their line, 20 slots) and tenant:acme (1 slot); the first is admitted and holds
// the tenant's slot, the second and third wait for it. One run on acme ended before (its run time,
// milliseconds, is what the estimate knows of acme's runs), so the first, which outlasts it, is
// expected by its deadline, an hour on.
type held struct {
	q         *pgqueue.Queue
	ids       [3]int64  // in the order enqueued
	workflows [3]string // their workflow IDs
}

func newHeld(t *testing.T) held {
	t.Helper()
	ctx := context.Background()
	e := testdb.Engine(t, pgqueue.Options{})
	require.NoError(t, e.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 20, TokensPerMinute: 90_000},
		throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1}))
	h := held{workflows: [3]string{"order-1", "order-2", "order/3 <b>ü</b>"}}
	earlier, err := e.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Owner: "worker-a",
		Namespace: "default", WorkflowID: "earlier", ActivityID: "1", ActivityType: "Summarize", Attempt: 1})
	require.NoError(t, err)
	res, err := e.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1)
	require.NoError(t, e.Complete(ctx, store.CompleteParams{TicketID: earlier.ID, ActualCost: -1, OutcomeKind: pgqueue.OutcomeCompleted}))
	ds, err := e.TakeDeliveries(ctx, 10, time.Minute)
	require.NoError(t, err)
	for _, d := range ds {
		require.NoError(t, e.Delivered(ctx, d.ID))
	}
	for i, wf := range h.workflows {
		p := store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Cost: 500, OutputCost: 200, Owner: "worker-a",
			Namespace: "default", WorkflowID: wf, RunID: "run-" + strconv.Itoa(i+1), ActivityID: "1", ActivityType: "Summarize", Attempt: 1}
		if i == 0 {
			p.RunID = "" // a ticket written without its run ID gets no link to Temporal
			p.Deadline = time.Now().Add(time.Hour)
		}
		tk, err := e.Enqueue(ctx, p)
		require.NoError(t, err)
		h.ids[i] = tk.ID
	}
	res, err = e.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 1, "the tenant's one slot")
	h.q, err = pgqueue.New(e.Pool(), pgqueue.Options{Schema: e.Schema()})
	require.NoError(t, err)
	return h
}

func (h held) server(t *testing.T, opts dashboard.Options) string {
	t.Helper()
	d, err := dashboard.New(h.q, opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", d))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/sluice/"
}

// getAnswer reads url: its status, and its body decoded into v when it is 200, else its error message.
func getAnswer(t *testing.T, url string, v any) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "%s", b)
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		require.NoError(t, json.Unmarshal(b, &e))
		return resp.StatusCode, e.Error
	}
	if v != nil {
		require.NoError(t, json.Unmarshal(b, v))
	}
	return resp.StatusCode, string(b)
}

// A key's tickets, waiting first in the order they are expected to be admitted, each with its place
// and what holds it, then those admitted; read without a token, writes allowed or not.
func TestDashboard_Tickets(t *testing.T) {
	t.Parallel()
	h := newHeld(t)
	base := h.server(t, dashboard.Options{AllowWrites: true})
	var kt dashboard.KeyTickets
	code, body := getAnswer(t, base+"api/tickets?key=tenant:acme", &kt)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "tenant:acme", kt.Key)
	require.Equal(t, dashboard.DefaultTickets, kt.Max)
	require.False(t, kt.Now.IsZero())
	require.Len(t, kt.Tickets, 3)
	for i, want := range []struct {
		id       int64
		state    pgqueue.TicketState
		place    int
		waitsFor string
		waitsOn  string
	}{
		{h.ids[1], pgqueue.TicketStateQueued, 1, "concurrency", "tenant:acme"},
		{h.ids[2], pgqueue.TicketStateQueued, 2, "concurrency", "tenant:acme"},
		{h.ids[0], pgqueue.TicketStateRunning, 0, "", ""},
	} {
		got := kt.Tickets[i]
		require.Equal(t, want.id, got.ID, "ticket %d", i)
		require.Equal(t, want.state, got.State, "ticket %d", i)
		require.Equal(t, want.place, got.Place, "ticket %d", i)
		require.Equal(t, want.waitsFor, got.WaitsFor, "ticket %d", i)
		require.Equal(t, want.waitsOn, got.WaitsOn, "ticket %d", i)
	}
	require.Equal(t, h.workflows[2], kt.Tickets[1].WorkflowID)
	require.Equal(t, throttle.Cost{Input: 300, Output: 200}, kt.Tickets[1].Reserved())
	require.Contains(t, body, `"place":2`, "the command's JSON names")
	require.Contains(t, body, `"waits_on":"tenant:acme"`)
	// In the words of sluice tickets, which the page shows.
	for i, want := range []string{"concurrency of tenant:acme", "concurrency of tenant:acme", "running"} {
		require.Equal(t, want, kt.Tickets[i].Words.Holds, "ticket %d", i)
	}
	require.Equal(t, "300 in + 200 out", kt.Tickets[1].Words.Cost)

	code, body = getAnswer(t, base+"api/tickets?key=tenant:acme&max=1", &kt)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, kt.Tickets, 1)
	require.Equal(t, h.ids[1], kt.Tickets[0].ID, "the waiting first")

	require.NoError(t, h.q.UpsertLimits(context.Background(), throttle.Limit{Key: "idle", MaxConcurrent: 5}))
	code, body = getAnswer(t, base+"api/tickets?key=idle", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"tickets":[]`, "none is an empty list, not null")
}

// A ticket's explanation, by ID or through its workflow, with its link to Temporal's UI.
func TestDashboard_Explain(t *testing.T) {
	t.Parallel()
	h := newHeld(t)
	base := h.server(t, dashboard.Options{TemporalUIURL: temporalUI})
	var ex dashboard.Explained
	code, body := getAnswer(t, base+"api/explain?id="+strconv.FormatInt(h.ids[2], 10), &ex)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, ex.Tickets, 1)
	x := ex.Tickets[0]
	require.Equal(t, h.ids[2], x.Ticket.ID)
	require.NotNil(t, x.Explanation)
	e := x.Explanation
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, "tenant:acme", e.Key, "the tenant holds it, not the provider with room")
	require.Equal(t, "openai", e.Line)
	require.Equal(t, 2, e.Place)
	require.Len(t, e.Limits, 2)
	require.True(t, e.Limits[0].Room, "openai has room")
	require.False(t, e.Limits[1].Room)
	require.Equal(t, 1, e.Limits[1].Ahead)
	require.Empty(t, e.Unknown)
	require.True(t, e.Estimate.After(e.Now), "an expected admission, after the slot's holder and the ticket ahead")
	// The same in sluice explain's words, made by the code that prints them (package words).
	w := x.Words
	require.Equal(t, words.Holds(*e, x.Ticket), w.Holds)
	require.Regexp(t, `^waits for concurrency of tenant:acme \(1/1 in flight\); 1 ticket ahead of it there; `+
		`(1 ticket holding it has been running since [:\d]+ UTC \([^)]+\), longer than any recent run, so it is expected to end by its deadline at the latest; )?`+
		`other limits hold back 1 ticket before it in openai: it does not wait for them$`, w.Holds)
	require.Equal(t, words.Expected(*e), w.Expected)
	require.Empty(t, w.State, "queued")
	require.Equal(t, "300 in + 200 out", w.Cost)
	require.Equal(t, []string{"openai", "tenant:acme"}, []string{w.Limits[0].Key, w.Limits[1].Key})
	require.Equal(t, []string{"yes", "concurrency"}, []string{w.Limits[0].Room, w.Limits[1].Room})
	require.Equal(t, "concurrency 1/1", w.Limits[1].Figures)
	require.Equal(t, "1 (300 in + 200 out)", w.Limits[1].Ahead)
	require.Equal(t, "0 +1 held elsewhere", w.Limits[0].Ahead)
	require.Equal(t, "now", w.Limits[0].Ready)
	require.Equal(t, words.Ready(e.Limits[1], e.Now), w.Limits[1].Ready)
	require.Equal(t, "http://localhost:8233/namespaces/default/workflows/order%2F3%20%3Cb%3E%C3%BC%3C%2Fb%3E/run-3/history", x.TemporalURL,
		"the values path-escaped")

	ex = dashboard.Explained{} // decoded afresh: a field left out must not keep the last answer's value
	code, body = getAnswer(t, base+"api/explain?workflow="+url.QueryEscape(h.workflows[1])+"&activity=1&namespace=default", &ex)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, ex.Tickets, 1)
	require.Equal(t, h.ids[1], ex.Tickets[0].Ticket.ID)
	require.Equal(t, 1, ex.Tickets[0].Explanation.Place)

	// The running ticket has nothing to wait for; written without its run ID, it has no link.
	ex = dashboard.Explained{}
	code, body = getAnswer(t, base+"api/explain?workflow="+h.workflows[0], &ex)
	require.Equal(t, http.StatusOK, code, body)
	require.Len(t, ex.Tickets, 1)
	require.Equal(t, pgqueue.TicketStateRunning, ex.Tickets[0].Ticket.State)
	require.Nil(t, ex.Tickets[0].Explanation)
	require.Regexp(t, `^admitted at [-\d]+ [:\d]+ UTC after waiting [\dhmsµ.]+; running, it holds its limits until it finishes$`, ex.Tickets[0].Words.State)
	require.Empty(t, ex.Tickets[0].Words.Holds)
	require.Empty(t, ex.Tickets[0].TemporalURL)
	require.NotContains(t, body, "temporal_url")

	// Without a template, no link.
	plain := h.server(t, dashboard.Options{})
	ex = dashboard.Explained{}
	code, body = getAnswer(t, plain+"api/explain?id="+strconv.FormatInt(h.ids[2], 10), &ex)
	require.Equal(t, http.StatusOK, code, body)
	require.Empty(t, ex.Tickets[0].TemporalURL)
}

// Bad input is answered 400 naming the parameter and its value; what does not exist, 404; another
// host, 403.
func TestDashboard_TicketsBadInput(t *testing.T) {
	t.Parallel()
	h := newHeld(t)
	base := h.server(t, dashboard.Options{AllowedHosts: []string{"127.0.0.1"}})
	for _, c := range []struct {
		query string
		code  int
		msg   string
	}{
		{"api/tickets", http.StatusBadRequest, "key is required"},
		{"api/tickets?key=", http.StatusBadRequest, "key: throttle: limit Key must not be empty"},
		{"api/tickets?key=%20%20", http.StatusBadRequest, `key: throttle: limit Key must not be blank, got "  "`},
		{"api/tickets?key=openai&max=0", http.StatusBadRequest, `max must be an integer from 1 to 1000, got "0"`},
		{"api/tickets?key=openai&max=1001", http.StatusBadRequest, `max must be an integer from 1 to 1000, got "1001"`},
		{"api/tickets?key=openai&max=ten", http.StatusBadRequest, `max must be an integer from 1 to 1000, got "ten"`},
		{"api/tickets?key=openai&key=tenant:acme", http.StatusBadRequest, "query parameter key is given 2 times"},
		{"api/tickets?key=openai&color=red", http.StatusBadRequest, `unknown query parameter "color": use key, max`},
		{"api/tickets?key=nope", http.StatusNotFound, `unknown limit: "nope"`},
		{"api/explain", http.StatusBadRequest, "id or workflow is required"},
		{"api/explain?id=0", http.StatusBadRequest, `id must be a ticket ID, an integer from 1, got "0"`},
		{"api/explain?id=-4", http.StatusBadRequest, `got "-4"`},
		{"api/explain?id=abc", http.StatusBadRequest, `got "abc"`},
		{"api/explain?id=99999999999999999999", http.StatusBadRequest, `got "99999999999999999999"`},
		{"api/explain?id=1&workflow=w", http.StatusBadRequest, "give id or workflow, not both"},
		{"api/explain?id=1&activity=a", http.StatusBadRequest, "give them with workflow, not id"},
		{"api/explain?activity=a", http.StatusBadRequest, "id or workflow is required"},
		{"api/explain?workflow=", http.StatusBadRequest, `workflow must not be empty, got ""`},
		{"api/explain?workflow=%ff", http.StatusBadRequest, `workflow must be valid UTF-8 of at most 1000 bytes, got "\xff"`},
		{"api/explain?workflow=" + strings.Repeat("w", 1001), http.StatusBadRequest, "workflow must be valid UTF-8 of at most 1000 bytes"},
		{"api/explain?workflow=w&activity=%ff", http.StatusBadRequest, `activity must be valid UTF-8 of at most 1000 bytes, got "\xff"`},
		{"api/explain?workflow=w&run=1", http.StatusBadRequest, `unknown query parameter "run": use id, workflow, activity, namespace`},
		{"api/explain?id=999999999", http.StatusNotFound, "no ticket 999999999"},
		{"api/explain?workflow=nope", http.StatusNotFound, `no ticket of workflow "nope"`},
		{"api/explain?workflow=order-2&activity=9", http.StatusNotFound, `no ticket of workflow "order-2", activity "9"`},
		{"api/explain?workflow=order-2&namespace=prod", http.StatusNotFound, `no ticket of workflow "order-2" in namespace "prod"`},
	} {
		code, msg := getAnswer(t, base+c.query, nil)
		require.Equal(t, c.code, code, "%s: %s", c.query, msg)
		require.Contains(t, msg, c.msg, c.query)
		t.Logf("GET %.60s -> %d %s", c.query, code, msg)
	}
	for _, path := range []string{"api/tickets?key=openai", "api/explain?id=1", "tickets.js"} {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Host = "rebound.example"
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "GET %s from another host", path)
	}
}

func TestDashboard_TemporalUIURL(t *testing.T) {
	t.Parallel()
	h := newHeld(t)
	for _, c := range []struct {
		tmpl, msg string
	}{
		{"http://localhost:8233/namespaces/{namespace}/workflows/{workflow}", "Options.TemporalUIURL has an unknown placeholder {workflow} (use {namespace}, {workflow_id} and {run_id})"},
		{"http://localhost:8233/{}", "unknown placeholder {}"},
		{"http://localhost:8233/workflows/{workflow_id", "Options.TemporalUIURL has a { or } that is not part of a placeholder"},
		{"localhost:8233/namespaces/{namespace}", `Options.TemporalUIURL must be an absolute http:// or https:// URL, got "localhost:8233/namespaces/{namespace}"`},
		{"/namespaces/{namespace}", "must be an absolute http:// or https:// URL"},
		{"ftp://temporal.example/{workflow_id}", "must be an absolute http:// or https:// URL"},
		{"javascript:alert(1)//{workflow_id}", "must be an absolute http:// or https:// URL"},
		{"{namespace}://temporal.example/", "must be an absolute http:// or https:// URL"},
		{"http:///namespaces/{namespace}", "must be an absolute http:// or https:// URL"},
	} {
		_, err := dashboard.New(h.q, dashboard.Options{TemporalUIURL: c.tmpl})
		require.ErrorContains(t, err, c.msg, c.tmpl)
	}
	for _, tmpl := range []string{temporalUI, "https://cloud.temporal.io/namespaces/{namespace}/workflows/{workflow_id}", "HTTP://temporal:8080/"} {
		_, err := dashboard.New(h.q, dashboard.Options{TemporalUIURL: tmpl})
		require.NoError(t, err, tmpl)
	}
}
