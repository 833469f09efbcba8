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

// Overview is GET api/overview: one page of the keys, ordered, filtered by prefix, and their count.
// Its JSON is the pgqueue.Overview's (rows, total, now) with the schema, the page asked for (params,
// its defaults filled in), its number and how many pages there are.
//
// Its query parameters: sort (key, queued, oldest_wait or use; key when not given), dir (asc or desc;
// asc for key and desc for the others when not given), prefix (keys that start with it), page (from 1)
// and page_size (1 to MaxPageSize, DefaultPageSize when not given). A bad one is answered 400 with
// {"error": "..."} naming it and its value. A row's wait, which its JSON leaves out, is now less its
// oldest_queued.
type Overview struct {
	pgqueue.Overview
	Schema string                 `json:"schema"`
	Params pgqueue.OverviewParams `json:"params"`
	Page   int                    `json:"page"`  // from 1
	Pages  int64                  `json:"pages"` // at least 1
}

// parseOverview reads and checks the query of GET api/overview: the page it asks for, and its number.
func parseOverview(v url.Values) (pgqueue.OverviewParams, int, error) {
	for name, vals := range v {
		if !slices.Contains([]string{"sort", "dir", "prefix", "page", "page_size"}, name) {
			return pgqueue.OverviewParams{}, 0, fmt.Errorf("unknown query parameter %q: use sort, dir, prefix, page or page_size", name)
		}
		if len(vals) > 1 {
			return pgqueue.OverviewParams{}, 0, fmt.Errorf("query parameter %s is given %d times", name, len(vals))
		}
	}
	p := pgqueue.OverviewParams{Prefix: v.Get("prefix"), Sort: pgqueue.OverviewSort(cmp.Or(v.Get("sort"), "key")), Limit: DefaultPageSize}
	page := 1
	if !slices.Contains([]pgqueue.OverviewSort{pgqueue.OverviewByKey, pgqueue.OverviewByQueued, pgqueue.OverviewByOldestWait, pgqueue.OverviewByUse}, p.Sort) {
		return p, page, fmt.Errorf("sort must be key, queued, oldest_wait or use, got %q", p.Sort)
	}
	dir := "desc" // the largest figures first
	if p.Sort == pgqueue.OverviewByKey {
		dir = "asc"
	}
	dir = cmp.Or(v.Get("dir"), dir)
	if dir != "asc" && dir != "desc" {
		return p, page, fmt.Errorf("dir must be asc or desc, got %q", dir)
	}
	p.Desc = dir == "desc"
	if !utf8.ValidString(p.Prefix) || len(p.Prefix) > throttle.MaxKeyLen {
		return p, page, fmt.Errorf("prefix must be valid UTF-8 of at most %d bytes, got %q", throttle.MaxKeyLen, p.Prefix)
	}
	var err error
	if s := v.Get("page"); s != "" {
		if page, err = strconv.Atoi(s); err != nil || page < 1 || page > maxPage {
			return p, page, fmt.Errorf("page must be an integer from 1 to %d, got %q", maxPage, s)
		}
	}
	if s := v.Get("page_size"); s != "" {
		if p.Limit, err = strconv.Atoi(s); err != nil || p.Limit < 1 || p.Limit > MaxPageSize {
			return p, page, fmt.Errorf("page_size must be an integer from 1 to %d, got %q", MaxPageSize, s)
		}
	}
	p.Offset = (page - 1) * p.Limit
	return p, page, nil
}

func (h *handler) serveOverview(w http.ResponseWriter, r *http.Request) {
	p, page, err := parseOverview(r.URL.Query())
	if err != nil {
		h.fail(w, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	o, err := h.q.Overview(ctx, p)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, Overview{Overview: o, Schema: h.q.Schema(), Params: p, Page: page,
		Pages: max(1, (o.Total+int64(p.Limit)-1)/int64(p.Limit))})
}

// statusOf reads the status of the keys GET api/status names with key=... (1 to maxCardKeys). A
// request that names none is refused: the status of every key is megabytes at 10,000 keys, and
// api/overview pages them. A key that does not exist is answered 404, with unknown_keys naming those
// of the keys asked for that do not exist (the page closes their cards).
func (h *handler) statusOf(ctx context.Context, r *http.Request) ([]pgqueue.KeyStatus, int, error) {
	v := r.URL.Query()
	for name := range v {
		if name != "key" {
			return nil, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q: use key (key=a&key=b)", name)
		}
	}
	keys := v["key"]
	if len(keys) == 0 {
		return nil, http.StatusBadRequest, fmt.Errorf("key is required: api/status?key=a&key=b (at most %d keys; api/overview pages every key)", maxCardKeys)
	}
	if len(keys) > maxCardKeys {
		return nil, http.StatusBadRequest, fmt.Errorf("key must be given at most %d times, got %d", maxCardKeys, len(keys))
	}
	for _, k := range keys {
		if err := throttle.ValidateKey(k); err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("key: %w", err)
		}
	}
	st, err := h.q.Status(ctx, keys...)
	if errors.Is(err, pgqueue.ErrUnknownLimit) {
		return st, http.StatusNotFound, err
	}
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return st, http.StatusOK, nil
}
