package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
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

// many is a schema of many keys: tenant:NNNNN (nine in ten) and user:NNNN (one in ten), each with
// MaxConcurrent 10 but those below. Three lines wait, written at different times: user:0003 (2
// tickets, an hour ago), tenant:00007 (5, half an hour ago) and tenant:05000 (9, ten minutes ago, or
// the last tenant's when there are fewer). Two keys hold tickets: tenant:00100 2 of its 2 and user:0005
// 3 of its 10. tenant:00009 is paused.
type many struct {
	q                    *pgqueue.Queue
	keys                 []string // in byte order
	busiest, full, third string
}

func newMany(t *testing.T, n int) many {
	t.Helper()
	ctx := context.Background()
	e := testdb.Engine(t, pgqueue.Options{})
	m := many{full: "tenant:00100", third: "user:0005"}
	users := n / 10
	for i := range n - users {
		m.keys = append(m.keys, fmt.Sprintf("tenant:%05d", i))
	}
	for i := range users {
		m.keys = append(m.keys, fmt.Sprintf("user:%04d", i))
	}
	sort.Strings(m.keys)
	m.busiest = fmt.Sprintf("tenant:%05d", min(5000, n-users-1))
	limits := make([]throttle.Limit, 0, len(m.keys))
	for _, k := range m.keys {
		l := throttle.Limit{Key: k, MaxConcurrent: 10}
		if k == m.full {
			l.MaxConcurrent = 2
		}
		limits = append(limits, l)
	}
	for b := range slices.Chunk(limits, 1000) {
		require.NoError(t, e.UpsertLimits(ctx, b...))
	}
	enqueueAt := func(q *store.Queue, key string, n int) {
		for range n {
			_, err := q.Enqueue(ctx, store.EnqueueParams{LimitKeys: []string{key}, Owner: "worker-a", WorkflowID: "wf-" + key, ActivityType: "Call"})
			require.NoError(t, err)
		}
	}
	enqueueAt(e, m.full, 2)
	enqueueAt(e, m.third, 3)
	res, err := e.Claim(ctx, store.ClaimParams{Owner: "worker-a", Max: 10})
	require.NoError(t, err)
	require.Len(t, res.Admitted, 5)
	// The waiting lines are written with clocks in the past, and no claim runs after them.
	now := time.Now()
	for _, w := range []struct {
		key string
		n   int
		ago time.Duration
	}{{"user:0003", 2, time.Hour}, {"tenant:00007", 5, 30 * time.Minute}, {m.busiest, 9, 10 * time.Minute}} {
		past, err := store.New(e.Pool(), store.Options{Schema: e.Schema(), Now: func() time.Time { return now.Add(-w.ago) }})
		require.NoError(t, err)
		enqueueAt(past, w.key, w.n)
	}
	m.q, err = pgqueue.New(e.Pool(), pgqueue.Options{Schema: e.Schema()})
	require.NoError(t, err)
	require.NoError(t, m.q.Pause(ctx, "tenant:00009", now.Add(time.Hour)))
	return m
}

func (m many) server(t *testing.T, opts dashboard.Options) string {
	t.Helper()
	h, err := dashboard.New(m.q, opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// get reads url's JSON into v, and returns the status and the error's text when the answer is one.
func get(t *testing.T, url string, v any) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		return resp.StatusCode, e.Error
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode, ""
}

func overview(t *testing.T, base, query string) dashboard.Overview {
	t.Helper()
	var o dashboard.Overview
	code, msg := get(t, base+"api/overview?"+query, &o)
	require.Equal(t, http.StatusOK, code, "%s: %s", query, msg)
	return o
}

func keysOf(o dashboard.Overview) []string {
	out := []string{}
	for _, k := range o.Rows {
		out = append(out, k.Key)
	}
	return out
}

// without is keys less drop, in order.
func without(keys []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return slices.Contains(drop, k) })
}

// The overview at 10,000 keys: the database sorts, filters by prefix and pages, and the answer is a
// page of 50 with the count; bad parameters are refused naming them.
func TestDashboard_Overview(t *testing.T) {
	t.Parallel()
	start := time.Now()
	m := newMany(t, 10_000)
	t.Logf("10,000 keys and their tickets written in %v", time.Since(start).Round(time.Millisecond))
	base := m.server(t, dashboard.Options{})

	t.Run("DefaultIsByKey", func(t *testing.T) {
		o := overview(t, base, "")
		require.Equal(t, int64(10_000), o.Total)
		require.Equal(t, int64(200), o.Pages)
		require.Equal(t, 1, o.Page)
		require.Equal(t, pgqueue.OverviewParams{Sort: pgqueue.OverviewByKey, Limit: dashboard.DefaultPageSize}, o.Params)
		require.Equal(t, m.keys[:50], keysOf(o))
		paused := o.Rows[9]
		require.Equal(t, "tenant:00009", paused.Key)
		require.True(t, paused.PausedUntil.After(o.Now))
		require.True(t, o.Rows[8].PausedUntil.IsZero())
		require.Equal(t, m.keys[len(m.keys)-50:], keysOf(overview(t, base, "page=200")))
		desc := slices.Clone(m.keys)
		slices.Reverse(desc)
		require.Equal(t, desc[50:100], keysOf(overview(t, base, "dir=desc&page=2")))
	})

	t.Run("ByQueued", func(t *testing.T) {
		o := overview(t, base, "sort=queued")
		require.True(t, o.Params.Desc, "the largest first")
		require.Equal(t, []string{m.busiest, "tenant:00007", "user:0003"}, keysOf(o)[:3])
		require.Equal(t, []int64{9, 5, 2, 0}, []int64{o.Rows[0].Queued, o.Rows[1].Queued, o.Rows[2].Queued, o.Rows[3].Queued})
		rest := without(m.keys, m.busiest, "tenant:00007", "user:0003")
		require.Equal(t, rest[:47], keysOf(o)[3:], "ties by key")
		asc := overview(t, base, "sort=queued&dir=asc&page=200")
		require.Equal(t, []string{"user:0003", "tenant:00007", m.busiest}, keysOf(asc)[47:])
	})

	t.Run("ByOldestWait", func(t *testing.T) {
		o := overview(t, base, "sort=oldest_wait")
		require.Equal(t, []string{"user:0003", "tenant:00007", m.busiest}, keysOf(o)[:3])
		wait := func(r pgqueue.OverviewRow) float64 { return o.Now.Sub(r.OldestQueued).Seconds() }
		require.InDelta(t, time.Hour.Seconds(), wait(o.Rows[0]), 60)
		require.InDelta(t, (30 * time.Minute).Seconds(), wait(o.Rows[1]), 60)
		require.InDelta(t, (10 * time.Minute).Seconds(), wait(o.Rows[2]), 60)
		require.True(t, o.Rows[3].OldestQueued.IsZero(), "none waits")
		require.Zero(t, o.Rows[0].OldestWait, "JSON leaves the wait out: the page reads it as now less oldest_queued")
	})

	t.Run("ByUse", func(t *testing.T) {
		o := overview(t, base, "sort=use")
		require.Equal(t, []string{m.full, m.third}, keysOf(o)[:2])
		require.Equal(t, 1.0, o.Rows[0].Use)
		require.Equal(t, "concurrency", o.Rows[0].UseOf)
		require.Equal(t, int64(2), o.Rows[0].InflightCount)
		require.Equal(t, 2, o.Rows[0].MaxConcurrent)
		require.InDelta(t, 0.3, o.Rows[1].Use, 1e-9)
		require.Zero(t, o.Rows[2].Use)
		require.Empty(t, o.Rows[2].UseOf)
		last := overview(t, base, "sort=use&dir=asc&page=200")
		require.Equal(t, append(without(m.keys, m.full, m.third)[10_000-2-48:], m.third, m.full), keysOf(last))
	})

	t.Run("Prefix", func(t *testing.T) {
		o := overview(t, base, "prefix=tenant:012")
		require.Equal(t, int64(100), o.Total)
		require.Equal(t, int64(2), o.Pages)
		require.Equal(t, "tenant:012", o.Params.Prefix)
		require.Equal(t, m.keys[1200:1250], keysOf(o))
		require.Equal(t, m.keys[1250:1300], keysOf(overview(t, base, "prefix=tenant:012&page=2")))
		past := overview(t, base, "prefix=tenant:012&page=3")
		require.Empty(t, past.Rows, "past the last page")
		require.NotNil(t, past.Rows, "[] in JSON, not null")
		require.Equal(t, int64(100), past.Total, "still counted")

		users := overview(t, base, "prefix=user:&sort=queued&page_size=5")
		require.Equal(t, int64(1000), users.Total)
		require.Equal(t, int64(200), users.Pages)
		require.Equal(t, []string{"user:0003", "user:0000", "user:0001", "user:0002", "user:0004"}, keysOf(users))
		none := overview(t, base, "prefix="+url.QueryEscape("tenant:%"))
		require.Zero(t, none.Total, "% is no wildcard")
		require.Equal(t, int64(1), none.Pages)
	})

	t.Run("PageSize", func(t *testing.T) {
		o := overview(t, base, "page_size=500&page=20")
		require.Len(t, o.Rows, 500)
		require.Equal(t, m.keys[9500:], keysOf(o))
		require.Empty(t, overview(t, base, "page_size=500&page=21").Rows)
	})

	t.Run("BadParameters", func(t *testing.T) {
		for _, c := range []struct{ query, msg string }{
			{"sort=color", `sort must be key, queued, oldest_wait or use, got "color"`},
			{"sort=queued&dir=up", `dir must be asc or desc, got "up"`},
			{"page=0", `page must be an integer from 1 to 1000000, got "0"`},
			{"page=-3", `page must be an integer from 1 to 1000000, got "-3"`},
			{"page=two", `page must be an integer from 1 to 1000000, got "two"`},
			{"page=1000001", `got "1000001"`},
			{"page_size=0", `page_size must be an integer from 1 to 500, got "0"`},
			{"page_size=501", `page_size must be an integer from 1 to 500, got "501"`},
			{"sort_by=queued", `unknown query parameter "sort_by": use sort, dir, prefix, page or page_size`},
			{"page=1&page=2", "query parameter page is given 2 times"},
			{"prefix=%FF", `prefix must be valid UTF-8 of at most 200 bytes, got "\xff"`},
		} {
			resp, err := http.Get(base + "api/overview?" + c.query)
			require.NoError(t, err)
			var e struct{ Error string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, c.query)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Contains(t, e.Error, c.msg, c.query)
		}
	})

	t.Run("CardOfOneKey", func(t *testing.T) {
		var st dashboard.Status
		code, msg := get(t, base+"api/status?key=tenant:00007&key=gone", &st)
		require.Equal(t, http.StatusNotFound, code, "a key that does not exist")
		require.Contains(t, msg, `unknown limit: ["gone"]`)
		code, msg = get(t, base+"api/status?key=tenant:00007", &st)
		require.Equal(t, http.StatusOK, code, msg)
		require.Len(t, st.Keys, 1)
		require.Equal(t, "tenant:00007", st.Keys[0].Configured.Key)
		require.Equal(t, int64(5), st.Keys[0].Queued)
		require.Len(t, st.Keys[0].Usage, 60)
		code, msg = get(t, base+"api/status?key=", &st)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, msg, "key: throttle: limit Key must not be empty")
		code, msg = get(t, base+"api/status?"+strings.Repeat("key=a&", 101), &st)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, msg, "key must be given at most 100 times, got 101")
	})

	t.Run("Timing", func(t *testing.T) {
		for _, q := range []string{"", "sort=queued", "sort=oldest_wait", "sort=use&dir=asc&page=200", "prefix=tenant:012&sort=use", "prefix=user:00"} {
			var took []time.Duration
			for range 5 {
				start := time.Now()
				overview(t, base, q)
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			t.Logf("GET api/overview?%-28s at 10,000 keys: median %v of 5 (min %v, max %v)", q, took[2].Round(100*time.Microsecond),
				took[0].Round(100*time.Microsecond), took[4].Round(100*time.Microsecond))
		}
		// api/status names its keys: what its default request (none named, refused) and a card's cost.
		for _, q := range []string{"", "?key=tenant:00007", "?key=tenant:00007&key=user:0003&key=tenant:00100&key=user:0005"} {
			start := time.Now()
			resp, err := http.Get(base + "api/status" + q)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			t.Logf("GET api/status%-60s at 10,000 keys: %d, %d bytes in %v", q, resp.StatusCode, len(b), time.Since(start).Round(100*time.Microsecond))
		}
	})
}
