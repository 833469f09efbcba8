package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OverviewSort names what an overview is ordered by.
type OverviewSort string

// The orders of an overview. Ties are broken by key, so that pages never overlap.
const (
	OverviewByKey        OverviewSort = "key"
	OverviewByQueued     OverviewSort = "queued"
	OverviewByOldestWait OverviewSort = "oldest_wait"
	OverviewByUse        OverviewSort = "use"
)

// MaxOverviewLimit is the most keys one page of an overview may hold.
const MaxOverviewLimit = 1000

// OverviewParams selects one page of an overview. Its zero value with a Limit set is the first page
// of every key, by key. Its JSON names (prefix, sort, desc, limit, offset) are those the dashboard's
// api/overview echoes.
type OverviewParams struct {
	// Prefix keeps the keys that start with it (byte-wise); empty keeps every key.
	Prefix string `json:"prefix"`
	// Sort orders the keys; empty is OverviewByKey. Desc reverses it.
	Sort OverviewSort `json:"sort"`
	Desc bool         `json:"desc"`
	// Limit is the page's size, 1 to MaxOverviewLimit; Offset how many keys come before it.
	Limit  int `json:"limit"`
	Offset int `json:"offset"`
}

// OverviewRow is one key of an overview: its line, and how much of its limits it uses. It is a plain
// value. Its JSON leaves out the times that are zero when unset, and OldestWait, which is the
// Overview's Now less OldestQueued.
type OverviewRow struct {
	Key string `json:"key"`
	// Queued counts the tickets waiting in the key's line; OldestQueued is as KeyStatus's (the oldest
	// of the line's head), zero when none waits; OldestWait is Now less it, zero when none waits.
	Queued       int64         `json:"queued"`
	OldestQueued time.Time     `json:"oldest_queued,omitzero"`
	OldestWait   time.Duration `json:"-"`
	// InflightCount and InflightTokens are the row's in-flight figures net of pending releases, as
	// admission reads them; MaxConcurrent and MaxInflightTokens their caps (0: none).
	InflightCount     int64 `json:"inflight_count"`
	InflightTokens    int64 `json:"inflight_tokens"`
	MaxConcurrent     int   `json:"max_concurrent"`
	MaxInflightTokens int64 `json:"max_inflight_tokens"`
	// What the key admitted over the minute before Now, and the effective limits per minute (the
	// configured ones lowered to what the provider's headers taught; 0: not set).
	RequestsLastMinute     int64   `json:"requests_last_minute"`
	TokensLastMinute       int64   `json:"tokens_last_minute"`
	InputTokensLastMinute  int64   `json:"input_tokens_last_minute"`
	OutputTokensLastMinute int64   `json:"output_tokens_last_minute"`
	RequestsPerMinute      float64 `json:"requests_per_minute"`
	TokensPerMinute        float64 `json:"tokens_per_minute"`
	InputTokensPerMinute   float64 `json:"input_tokens_per_minute"`
	OutputTokensPerMinute  float64 `json:"output_tokens_per_minute"`
	// Use is the largest share of a set limit in use: in-flight figures against their caps, the last
	// minute's admissions against the rates, and what each allowance counted in its window against
	// its amount (AllowanceStatus.Used, pending reconciliations folded in; it may pass 1); 0 when
	// nothing is used. UseOf names that limit: "concurrency", "inflight_tokens", "requests", "tokens",
	// "input_tokens", "output_tokens", or "allowance " and the allowance's spec ("allowance
	// tokens=10000/day"); empty when Use is 0.
	Use   float64 `json:"use"`
	UseOf string  `json:"use_of"`
	// PausedUntil is the row's pause, zero when none was set (it may be past: a pause still on is
	// after the Overview's Now).
	PausedUntil time.Time `json:"paused_until,omitzero"`
}

// Overview is one page of keys, the number of keys that match, and the instant it was read at. It is
// a plain value; Queue.Overview returns it, with Rows empty but not nil when no key is on the page.
type Overview struct {
	Rows  []OverviewRow `json:"rows"`
	Total int64         `json:"total"`
	Now   time.Time     `json:"now"`
}

// effectiveRate is the rate column c of the row aliased l lowered to what was learned, as
// throttle.EffectiveLimit does (learned is NULL or above zero; a rate of 0 is not set and stays 0).
// It is SQL because an overview sorts every matching key by use before it cuts a page;
// TestQueue_OverviewEffectiveRatesMatchThrottle checks the rates overviewRows gives (the request
// rate as Limit.RequestsPerMinute) against throttle's on random configured and learned rates.
func effectiveRate(c string) string {
	return `CASE WHEN l.learned_` + c + ` < l.` + c + ` THEN l.learned_` + c + ` ELSE l.` + c + ` END`
}

// overviewQueued and overviewOldest are a key's queued tickets and the instant its line's head was
// written (as Status reads them), for the key column k; each reads the key's line through its index.
func overviewQueued(k string) string {
	return `(SELECT count(*) FROM {s}.sluice_ticket t WHERE t.line_key = ` + k + ` AND t.state = 'queued')`
}

func overviewOldest(k string) string {
	return `(SELECT min(head.enqueued_at) FROM (SELECT t.enqueued_at FROM {s}.sluice_ticket t WHERE t.line_key = ` + k + `
		AND t.state = 'queued' ORDER BY t.priority, t.vstart, t.seq LIMIT ` + statusOldestAmong + `) head)`
}

// overviewWait is how long the line of key column k has waited at $1, in seconds; 0 when none waits.
func overviewWait(k string) string {
	return `coalesce(extract(epoch FROM $1::timestamptz - ` + overviewOldest(k) + `), 0)::float8`
}

// overviewRows are the figures of the keys of relation src (its column key): $1 is the instant read,
// $2 a minute before it (statusUsage's). The figures are computed once per key (OFFSET 0 keeps the
// planner from copying each subquery into every expression that uses it), and a caller that reads
// some columns only does not compute the others' subqueries (the planner drops the unused columns of a
// subquery). $7, $8 and $9 are the allowance uses of some keys (overviewAllowances): a key's use is
// the largest of its limits' and its allowances'. The pending releases (see limitReadColumns) are summed in one pass over their ledger,
// which holds only what the next claims will fold in, rather than probed per key. Then come the shares
// of the limits (NULL where not set), the largest of them, and the limit it is of (none when nothing
// is used).
func overviewRows(src string) string {
	return `SELECT x.*, coalesce(g.use, 0) AS use, CASE WHEN NOT g.use > 0 OR g.use IS NULL THEN ''
		WHEN g.use = x.c_share THEN 'concurrency' WHEN g.use = x.it_share THEN 'inflight_tokens' WHEN g.use = x.r_share THEN 'requests'
		WHEN g.use = x.t_share THEN 'tokens' WHEN g.use = x.i_share THEN 'input_tokens' WHEN g.use = x.o_share THEN 'output_tokens'
		ELSE x.a_name END AS use_of
	FROM (SELECT r.*, coalesce(extract(epoch FROM $1::timestamptz - r.oldest), 0)::float8 AS oldest_wait,
		CASE WHEN r.max_concurrent > 0 THEN r.inflight::float8 / r.max_concurrent END AS c_share,
		CASE WHEN r.max_inflight_tokens > 0 THEN r.inflight_tokens::float8 / r.max_inflight_tokens END AS it_share,
		CASE WHEN r.rpm > 0 THEN r.requests / r.rpm END AS r_share, CASE WHEN r.tpm > 0 THEN r.tokens / r.tpm END AS t_share,
		CASE WHEN r.itpm > 0 THEN r.input_tokens / r.itpm END AS i_share, CASE WHEN r.otpm > 0 THEN r.output_tokens / r.otpm END AS o_share
	FROM (SELECT l.key, ` + overviewQueued("l.key") + ` AS queued, ` + overviewOldest("l.key") + ` AS oldest,
		` + netPending("inflight_count", "coalesce(rel.count, 0)") + ` AS inflight,
		` + netPending("inflight_tokens", "coalesce(rel.reserved, 0)") + ` AS inflight_tokens,
		l.max_concurrent, l.max_inflight_tokens, l.paused_until, u.requests, u.tokens, u.input_tokens, u.output_tokens,
		60 * (` + effectiveRate("requests_per_second") + `) AS rpm, ` + effectiveRate("tokens_per_minute") + ` AS tpm,
		` + effectiveRate("input_tokens_per_minute") + ` AS itpm, ` + effectiveRate("output_tokens_per_minute") + ` AS otpm,
		al.share AS a_share, al.name AS a_name
	FROM ` + src + ` JOIN {s}.sluice_limit l USING (key)` + statusUsage + `
		LEFT JOIN unnest($7::text[], $8::float8[], $9::text[]) AS al(key, share, name) ON al.key = l.key
		LEFT JOIN (SELECT rl.key, sum(rl.count)::int AS count, ` + satSum("rl.reserved") + ` AS reserved
			FROM {s}.sluice_release rl GROUP BY rl.key) rel ON rel.key = l.key
	OFFSET 0) r) x
	CROSS JOIN LATERAL (SELECT greatest(x.c_share, x.it_share, x.r_share, x.t_share, x.i_share, x.o_share, x.a_share) AS use) g`
}

// overviewOrder is each order's column in overviewRows.
var overviewOrder = map[OverviewSort]string{
	OverviewByKey: "key", OverviewByQueued: "queued", OverviewByOldestWait: "oldest_wait", OverviewByUse: "use",
}

// overviewSQL is the statement of one page. The prefix is a byte-wise range ($3 to $4) that the
// text_pattern_ops index of migration 8 serves whatever the database's collation. The page ($5 keys
// after $6) is cut first, reading for every matching key only what the order needs: nothing ordered by
// key, a count of its line by queued, the head of its line by oldest wait, its row, pending releases
// and last minute by use. Then the page's keys alone get all their figures, read in the same snapshot.
// The total comes from a row that exists even when the page is empty.
func overviewSQL(sort OverviewSort, desc bool) string {
	dir := " ASC"
	if desc {
		dir = " DESC"
	}
	page := dir + `, key LIMIT $5 OFFSET $6`
	cut := map[OverviewSort]string{
		OverviewByKey:        `SELECT key FROM f ORDER BY key` + dir + ` LIMIT $5 OFFSET $6`,
		OverviewByQueued:     `SELECT key FROM f ORDER BY ` + overviewQueued("f.key") + page,
		OverviewByOldestWait: `SELECT key FROM f ORDER BY ` + overviewWait("f.key") + page,
		OverviewByUse:        `SELECT key FROM (` + overviewRows("f") + `) a ORDER BY use` + page,
	}[sort]
	return `WITH f AS (SELECT l.key FROM {s}.sluice_limit l WHERE l.key ~>=~ $3::text AND l.key ~<~ $4::text),
	p AS (` + cut + `),
	y AS (` + overviewRows("p") + `)
	SELECT n.total, y.key, y.queued, y.oldest, y.oldest_wait, y.inflight, y.inflight_tokens, y.max_concurrent, y.max_inflight_tokens,
		y.paused_until, y.requests, y.tokens, y.input_tokens, y.output_tokens, y.rpm, y.tpm, y.itpm, y.otpm, y.use, y.use_of
	FROM (SELECT count(*) AS total FROM f) n LEFT JOIN y ON true ORDER BY y.` + overviewOrder[sort] + dir + `, y.key`
}

// validate reports the first bad parameter, naming it and its value.
func (p OverviewParams) validate() error {
	switch {
	case overviewOrder[p.Sort] == "":
		return fmt.Errorf("Sort must be one of key, queued, oldest_wait, use, got %q", p.Sort)
	case p.Limit < 1 || p.Limit > MaxOverviewLimit:
		return fmt.Errorf("Limit must be from 1 to %d, got %d", MaxOverviewLimit, p.Limit)
	case p.Offset < 0:
		return fmt.Errorf("Offset must be >= 0, got %d", p.Offset)
	}
	return nil
}

// Overview returns one page of the keys that start with p.Prefix, in p's order, with their queued
// tickets, oldest wait and use of their limits, and how many keys match; in one statement that locks
// nothing. Its cost grows with the matching keys, not with the keys of the schema.
func (q *Queue) Overview(ctx context.Context, p OverviewParams) (Overview, error) {
	if p.Sort == "" {
		p.Sort = OverviewByKey
	}
	if err := p.validate(); err != nil {
		return Overview{}, fmt.Errorf("sluice: overview: %w", err)
	}
	var out Overview
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		now, err := q.now(ctx, tx)
		if err != nil {
			return err
		}
		// The planner prices each key's subqueries for lines of dozens of tickets, so that at
		// thousands of keys the statement passes jit_above_cost, and compiling it would take seconds
		// (measured: 2.7 s of a 3 s statement at 10,000 keys) for a statement of milliseconds.
		if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
			return err
		}
		_, upper := keyPrefixRange(p.Prefix)
		// Ordered by use, the page is cut by the allowances' use too: that of every matching key
		// with allowances is read first. Another order cuts the page first, and then reads the
		// allowances of its keys alone.
		allowances := overviewAllowances{keys: []string{}, shares: []float64{}, names: []string{}}
		if p.Sort == OverviewByUse {
			rows, err := tx.Query(ctx, q.s(allowanceKeysSQL), p.Prefix, upper)
			if err != nil {
				return err
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if allowances, err = q.readOverviewAllowances(ctx, tx, keys); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, q.s(overviewSQL(p.Sort, p.Desc)), now, now.Add(-time.Minute), p.Prefix, upper, p.Limit, p.Offset,
			allowances.keys, allowances.shares, allowances.names)
		if err != nil {
			return err
		}
		out = Overview{Now: now.UTC()}
		out.Rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (OverviewRow, error) { return scanOverview(row, &out.Total) })
		if err != nil {
			return err
		}
		if len(out.Rows) == 1 && out.Rows[0].Key == "" {
			out.Rows = out.Rows[:0] // the empty page's row of the total; empty, not nil: [] in JSON
		}
		if p.Sort != OverviewByUse && len(out.Rows) > 0 {
			keys := make([]string, len(out.Rows))
			for i, r := range out.Rows {
				keys[i] = r.Key
			}
			page, err := q.readOverviewAllowances(ctx, tx, keys)
			if err != nil {
				return err
			}
			raiseByAllowances(out.Rows, page)
		}
		return nil
	})
	if err != nil {
		return Overview{}, fmt.Errorf("sluice: overview: %w", err)
	}
	return out, nil
}

// scanOverview scans one row of overviewSQL, the total into total. The row of an empty page has
// only the total: its key is empty.
func scanOverview(row pgx.Row, total *int64) (OverviewRow, error) {
	var (
		r                   OverviewRow
		key, useOf          *string
		oldest, paused      *time.Time
		wait                *float64
		queued, n, nTok     *int64
		tok, inTok          *int64
		req, outTok, maxTok *int64
		maxN                *int
		rpm, tpm, itpm      *float64
		otpm, use           *float64
	)
	if err := row.Scan(total, &key, &queued, &oldest, &wait, &n, &nTok, &maxN, &maxTok, &paused, &req, &tok, &inTok, &outTok,
		&rpm, &tpm, &itpm, &otpm, &use, &useOf); err != nil {
		return r, err
	}
	if key == nil {
		return r, nil
	}
	r.Key, r.Queued, r.UseOf, r.Use = *key, *queued, *useOf, *use
	r.OldestWait = time.Duration(*wait * float64(time.Second))
	r.InflightCount, r.InflightTokens, r.MaxConcurrent, r.MaxInflightTokens = *n, *nTok, *maxN, *maxTok
	r.RequestsLastMinute, r.TokensLastMinute, r.InputTokensLastMinute, r.OutputTokensLastMinute = *req, *tok, *inTok, *outTok
	r.RequestsPerMinute, r.TokensPerMinute, r.InputTokensPerMinute, r.OutputTokensPerMinute = *rpm, *tpm, *itpm, *otpm
	if oldest != nil {
		r.OldestQueued = oldest.UTC()
	}
	if paused != nil {
		r.PausedUntil = paused.UTC()
	}
	return r, nil
}
