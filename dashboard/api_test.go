package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// live is a schema with tickets: openai with a line of 4 behind 2 running, and a tenant cap.
type live struct {
	e *store.Queue
	q *pgqueue.Queue
}

func newLive(t *testing.T) live {
	t.Helper()
	ctx := context.Background()
	e := testdb.Engine(t, pgqueue.Options{})
	require.NoError(t, e.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 2, RequestsPerSecond: 5, TokensPerMinute: 60_000},
		throttle.Limit{Key: "tenant:acme", MaxConcurrent: 10}))
	l := live{e: e}
	l.enqueue(t, 6)
	res, err := e.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 2)
	q, err := pgqueue.New(e.Pool(), pgqueue.Options{Schema: e.Schema()})
	require.NoError(t, err)
	l.q = q
	return l
}

func (l live) enqueue(t *testing.T, n int) {
	t.Helper()
	for range n {
		_, err := l.e.Enqueue(context.Background(), store.EnqueueParams{LimitKeys: []string{"openai", "tenant:acme"}, Cost: 500,
			Owner: "worker-a", WorkflowID: "wf", ActivityType: "Summarize", FairnessKey: "acme", Attempt: 1})
		require.NoError(t, err)
	}
}

func (l live) server(t *testing.T, opts dashboard.Options) (*httptest.Server, string) {
	t.Helper()
	h, err := dashboard.New(l.q, opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, srv.URL + "/sluice/"
}

// csrfOf reads the token the page carries.
func csrfOf(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base)
	require.NoError(t, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`<meta name="sluice-csrf" content="([^"]*)">`).FindSubmatch(page)
	require.NotNil(t, m, "the page carries its token")
	return string(m[1])
}

func post(t *testing.T, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e struct{ Error string }
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return resp.StatusCode, e.Error
	}
	return resp.StatusCode, string(b)
}

func TestDashboard_Status(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	_, base := l.server(t, dashboard.Options{})
	resp, err := http.Get(base + "api/status?key=openai&key=tenant:acme")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st dashboard.Status
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	require.False(t, st.Writable)
	require.Equal(t, l.q.Schema(), st.Schema)
	require.Len(t, st.Keys, 2)
	k := st.Keys[0]
	want, err := l.q.Status(context.Background(), "openai")
	require.NoError(t, err)
	want[0].Now = k.Now // read again, later
	require.Equal(t, want[0], k.KeyStatus, "the key's status as pgqueue reads it, through its JSON")
	require.Equal(t, "openai", k.Configured.Key)
	require.Equal(t, int64(4), k.Queued)
	require.Equal(t, int64(2), k.Running)
	require.Equal(t, int64(1000), k.State.InflightTokens)
	require.Equal(t, int64(2), k.RequestsLastMinute)
	require.Equal(t, "concurrency", k.HeadWaitReason)
	require.Equal(t, 60_000.0, k.Effective.TokensPerMinute)
	require.Positive(t, k.OldestWait())
	require.Len(t, k.Usage, 60, "10 minutes in steps of 10 s")
	var tokens int64
	for _, p := range k.Usage {
		tokens += p.Tokens
	}
	require.Equal(t, int64(1000), tokens, "the chart has the admissions")

	page, err := http.Get(base)
	require.NoError(t, err)
	defer page.Body.Close()
	require.Contains(t, page.Header.Get("Content-Security-Policy"), "default-src 'none'")
	b, _ := io.ReadAll(page.Body)
	require.Contains(t, string(b), `<meta name="sluice-csrf" content="">`, "a read-only page has no token to write with")
	require.NotContains(t, string(b), "http://", "nothing loaded from elsewhere")
	require.NotContains(t, string(b), "https://")
}

// api/status is bounded: it names the keys it reads (every key's status is megabytes at 10,000 keys:
// api/overview pages them), and a key that is not a limit is 404, with the error of api/tickets and
// api/history, and the unknown keys named apart for the page.
func TestDashboard_StatusNamesItsKeys(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	_, base := l.server(t, dashboard.Options{})
	answer := func(path string) (int, map[string]json.RawMessage) {
		t.Helper()
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), path)
		var body map[string]json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body), path)
		return resp.StatusCode, body
	}
	for _, c := range []struct{ query, msg string }{
		{"", `key is required: api/status?key=a&key=b (at most 100 keys; api/overview pages every key)`},
		{"?prefix=open", `unknown query parameter "prefix": use key (key=a&key=b)`},
		{"?key=openai&all=1", `unknown query parameter "all"`},
		{"?key=", `key: throttle: limit Key must not be empty`},
	} {
		code, body := answer("api/status" + c.query)
		require.Equal(t, http.StatusBadRequest, code, c.query)
		var msg string
		require.NoError(t, json.Unmarshal(body["error"], &msg))
		require.Contains(t, msg, c.msg, c.query)
	}

	code, body := answer("api/status?key=nosuch")
	require.Equal(t, http.StatusNotFound, code)
	require.JSONEq(t, `"sluice: unknown limit: [\"nosuch\"]"`, string(body["error"]))
	require.JSONEq(t, `["nosuch"]`, string(body["unknown_keys"]))
	tcode, tbody := answer("api/tickets?key=nosuch")
	require.Equal(t, http.StatusNotFound, tcode)
	require.Contains(t, string(tbody["error"]), `nosuch`)
	hcode, hbody := answer("api/history?key=nosuch")
	require.Equal(t, http.StatusNotFound, hcode)
	require.Contains(t, string(hbody["error"]), `nosuch`)
	for _, b := range []map[string]json.RawMessage{body, tbody, hbody} {
		var msg string
		require.NoError(t, json.Unmarshal(b["error"], &msg), "an error is {\"error\": \"...\"}")
		require.Contains(t, msg, "unknown limit")
	}

	code, body = answer("api/status?key=openai&key=gone&key=nosuch&key=gone")
	require.Equal(t, http.StatusNotFound, code)
	require.JSONEq(t, `["gone", "nosuch"]`, string(body["unknown_keys"]), "those that are not limits, once each")
	code, body = answer("api/status?key=tenant:acme&key=openai")
	require.Equal(t, http.StatusOK, code)
	var st dashboard.Status
	b, err := json.Marshal(body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &st))
	require.Equal(t, "openai", st.Keys[0].Configured.Key, "in key order")
	require.Equal(t, "tenant:acme", st.Keys[1].Configured.Key)
}

// Writes are refused unless allowed, without the page's token, or from another site; bad input is
// refused naming the value, and changes nothing.
func TestDashboard_Writes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newLive(t)
	_, ro := l.server(t, dashboard.Options{})
	code, body := post(t, ro+"api/limits", `{"key":"openai","max_concurrent":5}`, map[string]string{"X-Sluice-CSRF": csrfOf(t, ro)})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "read-only")

	_, rw := l.server(t, dashboard.Options{AllowWrites: true})
	token := csrfOf(t, rw)
	require.Len(t, token, 64)
	good := map[string]string{"X-Sluice-CSRF": token, "Sec-Fetch-Site": "same-origin"}
	before, err := l.q.Limit(ctx, "openai")
	require.NoError(t, err)
	for _, c := range []struct {
		path, body string
		header     map[string]string
		code       int
		msg        string
	}{
		{"api/limits", `{"key":"openai","max_concurrent":5}`, nil, http.StatusForbidden, "X-Sluice-CSRF"},
		{"api/limits", `{"key":"openai","max_concurrent":5}`, map[string]string{"X-Sluice-CSRF": "nope"}, http.StatusForbidden, "X-Sluice-CSRF"},
		{"api/limits", `{"key":"openai","max_concurrent":5}`, map[string]string{"X-Sluice-CSRF": token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, `Sec-Fetch-Site "cross-site"`},
		{"api/limits", `{"key":"openai","max_concurrent":5}`, map[string]string{"X-Sluice-CSRF": token, "Origin": "http://evil.example"}, http.StatusForbidden, `Origin "http://evil.example"`},
		{"api/limits", `{"key":"nope","max_concurrent":5}`, good, http.StatusNotFound, `"nope"`},
		{"api/limits", `{"key":"openai","requests_per_second":-3}`, good, http.StatusBadRequest, "RequestsPerSecond must be >= 0 (0 means not set), got -3"},
		{"api/limits", `{"key":"openai","tokens_per_minute":NaN}`, good, http.StatusBadRequest, "invalid character 'N'"},
		{"api/limits", `{"key":"openai","tokens_per_minute":1e400}`, good, http.StatusBadRequest, "1e400"},
		{"api/limits", `{"key":"openai","max_concurrent":-1}`, good, http.StatusBadRequest, "MaxConcurrent must be >= 0"},
		{"api/limits", `{"key":"openai","color":"red"}`, good, http.StatusBadRequest, `unknown field "color"`},
		{"api/limits", `{"key":"openai","allowances":["tokens=5/fortnight"]}`, good, http.StatusBadRequest, `period "fortnight"`},
		{"api/limits", `{"key":"openai","allowances":["usd=1/day","usd=2/day"]}`, good, http.StatusBadRequest, "keep one"},
		{"api/limits", `{"key":"openai","allowances":["usd=1/day"],"on_spent":"maybe"}`, good, http.StatusBadRequest, `OnSpent must be wait or refuse, got "maybe"`},
		{"api/pause", `{"key":"openai","seconds":0}`, good, http.StatusBadRequest, "seconds must be from 0 to 31622400 (a year), got 0"},
		{"api/pause", `{"key":"nope","seconds":10}`, good, http.StatusNotFound, `"nope"`},
		{"api/resume", `{"key":"nope"}`, good, http.StatusNotFound, `"nope"`},
		{"api/resume", strings.Repeat(" ", 5000), good, http.StatusBadRequest, "request body"},
	} {
		code, body := post(t, rw+c.path, c.body, c.header)
		require.Equal(t, c.code, code, "%s %s: %s", c.path, c.body, body)
		require.Contains(t, body, c.msg, "%s %s", c.path, c.body)
		t.Logf("POST %s %.60s -> %d %s", c.path, c.body, code, strings.TrimSpace(body))
	}
	after, err := l.q.Limit(ctx, "openai")
	require.NoError(t, err)
	require.Equal(t, before, after, "no refused request changed the limit")
	st, err := l.q.Status(ctx, "openai")
	require.NoError(t, err)
	require.True(t, st[0].State.PausedUntil.IsZero(), "nor paused it")

	code, body = post(t, rw+"api/limits", `{"key":"openai","burst":2}`, good)
	require.Equal(t, http.StatusOK, code, body)
	code, body = post(t, rw+"api/limits", `{"key":"openai","max_concurrent":5,"requests_per_second":5,"tokens_per_minute":90000}`, good)
	require.Equal(t, http.StatusOK, code, body)
	after, err = l.q.Limit(ctx, "openai")
	require.NoError(t, err)
	require.Equal(t, throttle.Limit{Key: "openai", MaxConcurrent: 5, RequestsPerSecond: 5, Burst: 2, TokensPerMinute: 90_000, TokenBurst: 90_000}, after,
		"an unchanged rate keeps its burst; a changed one goes back to the default")

	// Allowances as an operator writes them; on_spent for all of them.
	code, body = post(t, rw+"api/limits", `{"key":"openai","allowances":["usd=5.00/day@America/Los_Angeles","requests=1000/hour"],
		"on_spent":"refuse"}`, good)
	require.Equal(t, http.StatusOK, code, body)
	after, err = l.q.Limit(ctx, "openai")
	require.NoError(t, err)
	require.Equal(t, []string{"usd=5.00/day@America/Los_Angeles", "requests=1000/hour"},
		[]string{after.Allowances[0].String(), after.Allowances[1].String()})
	require.Equal(t, throttle.OnSpentRefuse, after.Allowances[1].OnSpent)
	code, body = post(t, rw+"api/limits", `{"key":"openai","allowances":[]}`, good)
	require.Equal(t, http.StatusOK, code, body)
	after, err = l.q.Limit(ctx, "openai")
	require.NoError(t, err)
	require.Empty(t, after.Allowances, "an empty list removes them")

	code, body = post(t, rw+"api/pause", `{"key":"openai","seconds":600}`, good)
	require.Equal(t, http.StatusOK, code, body)
	st, err = l.q.Status(ctx, "openai")
	require.NoError(t, err)
	require.WithinDuration(t, st[0].Now.Add(10*time.Minute), st[0].State.PausedUntil, time.Minute)
	// An operator's pause is set as given: a provider's longer pause is shortened to it.
	require.NoError(t, l.q.Pause(ctx, "openai", st[0].Now.Add(18*time.Minute)))
	code, body = post(t, rw+"api/pause", `{"key":"openai","seconds":60}`, good)
	require.Equal(t, http.StatusOK, code, body)
	st, err = l.q.Status(ctx, "openai")
	require.NoError(t, err)
	require.WithinDuration(t, st[0].Now.Add(time.Minute), st[0].State.PausedUntil, 30*time.Second, "shortened from 18 minutes to 1")
	code, body = post(t, rw+"api/resume", `{"key":"openai"}`, good)
	require.Equal(t, http.StatusOK, code, body)
	st, err = l.q.Status(ctx, "openai")
	require.NoError(t, err)
	require.True(t, st[0].State.PausedUntil.IsZero())
}

// With AllowedHosts, a request naming another host is refused, reads included: a page that rebinds
// its own name to 127.0.0.1 cannot read the token or the status.
func TestDashboard_AllowedHosts(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	_, base := l.server(t, dashboard.Options{AllowWrites: true, AllowedHosts: []string{"localhost", "127.0.0.1", "::1"}})
	resp, err := http.Get(base + "api/status?key=openai")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "127.0.0.1 is allowed")
	for _, path := range []string{"", "api/status?key=openai"} {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Host = "rebound.example:8080"
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "GET /%s", path)
		require.Contains(t, string(b), `host "rebound.example:8080" is not allowed`)
		require.NotContains(t, string(b), "sluice-csrf")
	}
}

func TestDashboard_BadOptions(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	for _, c := range []struct {
		opts dashboard.Options
		msg  string
	}{
		{dashboard.Options{Refresh: time.Millisecond}, "Options.Refresh must be at least 100ms, got 1ms"},
		{dashboard.Options{Step: -time.Second}, "Options.Step must be at least 1s, got -1s"},
		{dashboard.Options{Window: 2 * time.Hour}, "Options.Window must be from Step (10s) to 1h0m0s, got 2h0m0s"},
		{dashboard.Options{Window: time.Hour, Step: time.Second}, "at most 720 points"},
	} {
		_, err := dashboard.New(l.q, c.opts)
		require.ErrorContains(t, err, c.msg)
	}
	_, err := dashboard.New(nil, dashboard.Options{})
	require.ErrorContains(t, err, "nil")
}

// adminOf is the administration and read model (what the dashboard is given) of engine e's schema,
// on its pool, with opts' clock.
func adminOf(t *testing.T, e *store.Queue, opts pgqueue.Options) *pgqueue.Queue {
	t.Helper()
	opts.Schema = e.Schema()
	q, err := pgqueue.New(e.Pool(), opts)
	require.NoError(t, err)
	return q
}
