package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// getJSON reads url's JSON into v and returns the status code.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

// api/history lists a key's limit changes with who made them, the page's own as its remote address;
// api/status gives each key the limit as it stood over the charts' window.
func TestDashboard_History(t *testing.T) {
	t.Parallel()
	l := newLive(t)
	_, base := l.server(t, dashboard.Options{AllowWrites: true})
	good := map[string]string{"X-Sluice-CSRF": csrfOf(t, base)}
	code, body := post(t, base+"api/limits", `{"key":"openai","requests_per_second":8}`, good)
	require.Equal(t, http.StatusOK, code, body)

	var h dashboard.History
	require.Equal(t, http.StatusOK, getJSON(t, base+"api/history?key=openai", &h))
	require.Equal(t, "openai", h.Key)
	require.Len(t, h.Changes, 2)
	require.Equal(t, pgqueue.ChangeCreated, h.Changes[0].Kind)
	require.Equal(t, pgqueue.ProgramChangedBy(), h.Changes[0].Who)
	c := h.Changes[1]
	require.Equal(t, pgqueue.ChangeConfigured, c.Kind)
	require.Regexp(t, `^dashboard 127\.0\.0\.1:\d+$`, c.Who)
	require.Equal(t, []pgqueue.FieldChange{{Field: "requests_per_second", Before: 5, After: 8}, {Field: "burst", Before: 5, After: 8}}, c.Changed)
	want, err := l.q.LimitHistory(context.Background(), "openai", c.At.AddDate(-1, 0, 0), 20)
	require.NoError(t, err)
	require.Equal(t, want, h.Changes, "pgqueue's records, through their JSON")

	require.Equal(t, http.StatusOK, getJSON(t, base+"api/history?key=openai&max=1", &h))
	require.Len(t, h.Changes, 1)
	require.Equal(t, pgqueue.ChangeConfigured, h.Changes[0].Kind, "the last one")

	for _, bad := range []struct {
		query string
		code  int
		msg   string
	}{
		{"", http.StatusBadRequest, "key is required"},
		{"?key=openai&max=0", http.StatusBadRequest, `max must be a whole number from 1 to 1000, got "0"`},
		{"?key=openai&max=lots", http.StatusBadRequest, `got "lots"`},
		{"?key=nope", http.StatusNotFound, `unknown limit: "nope"`},
	} {
		var e struct{ Error string }
		require.Equal(t, bad.code, getJSON(t, base+"api/history"+bad.query, &e), bad.query)
		require.Contains(t, e.Error, bad.msg)
	}

	var st dashboard.Status
	require.Equal(t, http.StatusOK, getJSON(t, base+"api/status?key=openai", &st))
	steps := st.Keys[0].LimitSteps
	require.Len(t, steps, 3, "none before the window's first limit, then created, then changed")
	require.Equal(t, st.Keys[0].Usage[0].At, steps[0].At, "from the charts' first step")
	require.Zero(t, steps[0].Effective.RequestsPerSecond, "created within the window: no limit before")
	require.Equal(t, 5.0, steps[1].Effective.RequestsPerSecond)
	require.Equal(t, 8.0, steps[2].Effective.RequestsPerSecond)
	require.Equal(t, c.At, steps[2].At)
	require.Equal(t, st.Keys[0].Effective, steps[2].Effective, "the last step is the limit in force")

	// Allowances changed: each one added, resized or whose on-spent changed, as pgqueue lists them.
	code, body = post(t, base+"api/limits", `{"key":"openai","allowances":["usd=1.00/day","requests=10/hour"]}`, good)
	require.Equal(t, http.StatusOK, code, body)
	code, body = post(t, base+"api/limits", `{"key":"openai","allowances":["usd=2.00/day","requests=10/hour"],"on_spent":"refuse"}`, good)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, http.StatusOK, getJSON(t, base+"api/history?key=openai&max=2", &h))
	usd1 := throttle.Allowance{Meter: throttle.MeterMoney, Currency: "USD", Amount: 1_000_000, Calendar: throttle.CalendarDay}
	req := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 10, Calendar: throttle.CalendarHour}
	usd2, reqRefuse := usd1, req
	usd2.Amount, usd2.OnSpent, reqRefuse.OnSpent = 2_000_000, throttle.OnSpentRefuse, throttle.OnSpentRefuse
	require.Equal(t, []pgqueue.FieldChange{{Field: "allowances", After: 1_000_000, AfterAllowance: &usd1},
		{Field: "allowances", After: 10, AfterAllowance: &req}}, h.Changes[0].Changed)
	require.Equal(t, []pgqueue.FieldChange{{Field: "allowances", Before: 1_000_000, After: 2_000_000, BeforeAllowance: &usd1, AfterAllowance: &usd2},
		{Field: "allowances", Before: 10, After: 10, BeforeAllowance: &req, AfterAllowance: &reqRefuse}}, h.Changes[1].Changed)
}
