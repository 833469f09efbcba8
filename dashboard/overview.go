package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// The overview's page sizes: DefaultPageSize when page_size is not given, at most MaxPageSize.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// maxPage bounds page, so that the offset it makes stays far from overflowing.
const maxPage = 1_000_000

// maxCardKeys bounds the keys one GET api/status?key=... may ask for.
const maxCardKeys = 100

// OverviewKey is one row of the overview's table: a key's line and how much of its limits it uses.
type OverviewKey struct {
	Key               string  `json:"key"`
	Queued            int64   `json:"queued"`
	OldestWaitSeconds float64 `json:"oldest_wait_s"`
	// InflightCount and InflightTokens hold the key; MaxConcurrent and MaxInflightTokens are their
	// caps, 0 when not set.
	InflightCount     int64 `json:"inflight_count"`
	MaxConcurrent     int   `json:"max_concurrent"`
	InflightTokens    int64 `json:"inflight_tokens"`
	MaxInflightTokens int64 `json:"max_inflight_tokens"`
	// What the key admitted over the last minute, and the limits per minute admission applies (0: not set).
	RequestsLastMinute int64   `json:"requests_last_minute"`
	RequestsPerMinute  float64 `json:"requests_per_minute"`
	TokensLastMinute   int64   `json:"tokens_last_minute"`
	TokensPerMinute    float64 `json:"tokens_per_minute"`
	// Use is the largest share of a limit in use (see pgqueue.OverviewRow.Use), and UseOf names it.
	Use         float64    `json:"use"`
	UseOf       string     `json:"use_of"`
	PausedUntil *time.Time `json:"paused_until"`
}

// Overview is GET api/overview: one page of the keys, ordered, filtered by prefix, and their count.
//
// Its query parameters: sort (key, queued, oldest_wait or use; key when not given), dir (asc or desc;
// asc for key and desc for the others when not given), prefix (keys that start with it), page (from 1)
// and page_size (1 to MaxPageSize, DefaultPageSize when not given). A bad one is answered 400 with
// {"error": "..."} naming it and its value.
type Overview struct {
	Now      time.Time     `json:"now"`
	Schema   string        `json:"schema"`
	Prefix   string        `json:"prefix"`
	Sort     string        `json:"sort"`
	Dir      string        `json:"dir"`
	Page     int           `json:"page"`
	PageSize int           `json:"page_size"`
	Pages    int64         `json:"pages"` // at least 1
	Total    int64         `json:"total"` // the keys that match the prefix
	Keys     []OverviewKey `json:"keys"`
}

// overviewQuery is what GET api/overview asks for.
type overviewQuery struct {
	prefix, sort, dir string
	page, pageSize    int
}

// parseOverview reads and checks the query of GET api/overview.
func parseOverview(v url.Values) (overviewQuery, error) {
	for name, vals := range v {
		if !slices.Contains([]string{"sort", "dir", "prefix", "page", "page_size"}, name) {
			return overviewQuery{}, fmt.Errorf("unknown query parameter %q: use sort, dir, prefix, page or page_size", name)
		}
		if len(vals) > 1 {
			return overviewQuery{}, fmt.Errorf("query parameter %s is given %d times", name, len(vals))
		}
	}
	q := overviewQuery{prefix: v.Get("prefix"), sort: cmp.Or(v.Get("sort"), "key"), page: 1, pageSize: DefaultPageSize}
	if !slices.Contains([]string{"key", "queued", "oldest_wait", "use"}, q.sort) {
		return q, fmt.Errorf("sort must be key, queued, oldest_wait or use, got %q", q.sort)
	}
	q.dir = "desc" // the largest figures first
	if q.sort == "key" {
		q.dir = "asc"
	}
	q.dir = cmp.Or(v.Get("dir"), q.dir)
	if q.dir != "asc" && q.dir != "desc" {
		return q, fmt.Errorf("dir must be asc or desc, got %q", q.dir)
	}
	if !utf8.ValidString(q.prefix) || len(q.prefix) > throttle.MaxKeyLen {
		return q, fmt.Errorf("prefix must be valid UTF-8 of at most %d bytes, got %q", throttle.MaxKeyLen, q.prefix)
	}
	var err error
	if s := v.Get("page"); s != "" {
		if q.page, err = strconv.Atoi(s); err != nil || q.page < 1 || q.page > maxPage {
			return q, fmt.Errorf("page must be an integer from 1 to %d, got %q", maxPage, s)
		}
	}
	if s := v.Get("page_size"); s != "" {
		if q.pageSize, err = strconv.Atoi(s); err != nil || q.pageSize < 1 || q.pageSize > MaxPageSize {
			return q, fmt.Errorf("page_size must be an integer from 1 to %d, got %q", MaxPageSize, s)
		}
	}
	return q, nil
}

func (h *handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	oq, err := parseOverview(r.URL.Query())
	if err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	o, err := h.q.Overview(ctx, pgqueue.OverviewParams{Prefix: oq.prefix, Sort: pgqueue.OverviewSort(oq.sort), Desc: oq.dir == "desc",
		Limit: oq.pageSize, Offset: (oq.page - 1) * oq.pageSize})
	if err != nil {
		h.fail(w, http.StatusInternalServerError, err)
		return
	}
	out := Overview{Now: o.Now, Schema: h.q.Schema(), Prefix: oq.prefix, Sort: oq.sort, Dir: oq.dir, Page: oq.page, PageSize: oq.pageSize,
		Pages: max(1, (o.Total+int64(oq.pageSize)-1)/int64(oq.pageSize)), Total: o.Total, Keys: make([]OverviewKey, len(o.Rows))}
	for i, k := range o.Rows {
		out.Keys[i] = OverviewKey{Key: k.Key, Queued: k.Queued, OldestWaitSeconds: k.OldestWait.Seconds(),
			InflightCount: k.InflightCount, MaxConcurrent: k.MaxConcurrent, InflightTokens: k.InflightTokens, MaxInflightTokens: k.MaxInflightTokens,
			RequestsLastMinute: k.RequestsLastMinute, RequestsPerMinute: k.RequestsPerMinute,
			TokensLastMinute: k.TokensLastMinute, TokensPerMinute: k.TokensPerMinute, Use: k.Use, UseOf: k.UseOf}
		if p := k.PausedUntil; p.After(o.Now) {
			out.Keys[i].PausedUntil = &p
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// statusOf reads the status of the keys GET api/status names with key=... (at most maxCardKeys;
// those that do not exist are left out, so that the card of a key gone closes), or of every key when
// it names none.
func (h *handler) statusOf(ctx context.Context, r *http.Request) ([]pgqueue.KeyStatus, int, error) {
	keys := r.URL.Query()["key"]
	if len(keys) > maxCardKeys {
		return nil, http.StatusBadRequest, fmt.Errorf("key must be given at most %d times, got %d", maxCardKeys, len(keys))
	}
	for _, k := range keys {
		if err := throttle.ValidateKey(k); err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("key: %w", err)
		}
	}
	st, err := h.q.Status(ctx, keys...)
	if err != nil && !(len(keys) > 0 && errors.Is(err, pgqueue.ErrUnknownLimit)) {
		return nil, http.StatusInternalServerError, err
	}
	return st, http.StatusOK, nil
}
