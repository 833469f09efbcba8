package pgqueue

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
)

// OverviewSort names what Overview orders the keys by.
type OverviewSort string

// The orders of Overview. Ties are broken by key, so that pages never overlap.
const (
	// OverviewByKey orders by key, in the database's collation, as Status does.
	OverviewByKey OverviewSort = "key"
	// OverviewByQueued orders by the tickets queued in the key's line.
	OverviewByQueued OverviewSort = "queued"
	// OverviewByOldestWait orders by how long the line's oldest queued ticket has waited.
	OverviewByOldestWait OverviewSort = "oldest_wait"
	// OverviewByUse orders by the largest share of a limit in use (OverviewRow.Use).
	OverviewByUse OverviewSort = "use"
)

// MaxOverviewLimit is the most keys one page of Overview may hold.
const MaxOverviewLimit = engine.MaxOverviewLimit

// OverviewParams selects one page of Overview. The zero value is invalid: Limit must be set.
type OverviewParams struct {
	// Prefix keeps the keys that start with it, compared byte-wise. Defaults to "" (every key).
	Prefix string
	// Sort orders the keys. Defaults to OverviewByKey.
	Sort OverviewSort
	// Desc reverses Sort. Defaults to false (ascending).
	Desc bool
	// Limit is how many keys the page holds, from 1 to MaxOverviewLimit.
	Limit int
	// Offset is how many keys come before the page. Defaults to 0.
	Offset int
}

// OverviewRow is one key of Overview: its line, and how much of its limits it uses.
type OverviewRow struct {
	Key string
	// Queued counts the tickets waiting in the key's line.
	Queued int64
	// OldestQueued is when the oldest ticket at the line's head was written, as in KeyStatus; zero when
	// none waits. OldestWait is Now less it, zero when none waits.
	OldestQueued time.Time
	OldestWait   time.Duration
	// InflightCount and InflightTokens are what holds the key, as admission counts it; MaxConcurrent
	// and MaxInflightTokens are their caps (0: none).
	InflightCount, InflightTokens int64
	MaxConcurrent                 int
	MaxInflightTokens             int64
	// RequestsLastMinute and the token figures are what the key admitted over the minute before Now,
	// as in KeyStatus.
	RequestsLastMinute, TokensLastMinute, InputTokensLastMinute, OutputTokensLastMinute int64
	// RequestsPerMinute and the token rates are the limits admission applies (the configured ones
	// lowered to what the provider's headers taught), per minute; 0 when not set.
	RequestsPerMinute, TokensPerMinute, InputTokensPerMinute, OutputTokensPerMinute float64
	// Use is the largest share of a set limit in use: the in-flight figures against their caps, and
	// the last minute's admissions against the rates. It may pass 1 (a burst, or a rate lowered by
	// the provider's headers). UseOf names that limit: "concurrency", "inflight_tokens", "requests",
	// "tokens", "input_tokens" or "output_tokens"; empty when Use is 0.
	Use   float64
	UseOf string
	// PausedUntil is the key's pause; zero when none was set. It may be before Now: the pause is over.
	PausedUntil time.Time
}

// Overview is one page of Queue.Overview.
type Overview struct {
	// Rows are the page's keys, in the order asked for; empty past the last page.
	Rows []OverviewRow
	// Total is how many keys start with the prefix, on every page.
	Total int64
	// Now is the database's clock when the page was read.
	Now time.Time
}

// Overview returns one page of the keys that start with p.Prefix, ordered by p.Sort, with for each
// its queued tickets, its oldest wait and its use of its limits, and how many keys match. It is one
// statement that locks nothing, made for a table of thousands of keys: the prefix is served by an
// index (migration 8), and the database orders and pages the keys. Ordered by key, it reads the lines
// of the page's keys only; ordered by a figure, it reads that figure for every matching key (a few
// index probes each), so narrowing the prefix makes it cheaper. For one key's whole status, and its
// history, use Status and Usage. Bad parameters return an error naming the field and the value.
func (q *Queue) Overview(ctx context.Context, p OverviewParams) (Overview, error) {
	o, err := q.e.Overview(ctx, engine.OverviewParams{Prefix: p.Prefix, Sort: engine.OverviewSort(p.Sort), Desc: p.Desc,
		Limit: p.Limit, Offset: p.Offset})
	out := Overview{Total: o.Total, Now: o.Now, Rows: make([]OverviewRow, len(o.Rows))}
	for i, r := range o.Rows {
		out.Rows[i] = OverviewRow(r)
	}
	return out, err
}
