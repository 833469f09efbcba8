package store

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
)

// aheadPage is a page of the first line a claim locks, read in the claim's first round trip after
// the first locks (newClaimTx): a claim filled by its first line then costs one round trip less.
type aheadPage struct {
	sql     string
	args    []any
	size    int      // the size it is read with: a page shorter than it ends its line
	tickets []Ticket // the page, once read; nil once the claim has used it
}

// readAhead is the page read ahead by a claim of p from the line after from: the first line with
// queued work after from, locked by the page's own statement (the claim's first locks, sent before it
// in the same round trip, do not make it skip the line), usually the line the locks took first. When
// a race makes it another line (another claimer freed it between the two statements), the claim takes
// that line too (adoptAhead).
func (q *Queue) readAhead(p ClaimParams, from string) *aheadPage {
	return q.aheadPageOf(p, `l.key > $2 AND EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued')`, from)
}

// aheadPageOf is the page of a claim of p read ahead from the first line, in key order, whose limit
// row l meets where (given arg as $2) and that no other claimer holds.
func (q *Queue) aheadPageOf(p ClaimParams, where string, arg any) *aheadPage {
	size := min(max(p.Max, 64), maxLineScan)
	return &aheadPage{size: size, args: []any{size, arg}, sql: q.s(`SELECT ` + ticketColumns + ` FROM {s}.sluice_ticket WHERE line_key = (
			SELECT l.key FROM {s}.sluice_limit l WHERE ` + where + `
			ORDER BY key LIMIT 1 FOR NO KEY UPDATE OF l SKIP LOCKED)
		AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $1 FOR UPDATE SKIP LOCKED`)}
}

// line is the line of the page read ahead and not yet used, or "" for none.
func (a *aheadPage) line() string {
	if a == nil || len(a.tickets) == 0 {
		return ""
	}
	return a.tickets[0].LineKey
}

// of reports whether the page read ahead, not yet used, is line's.
func (a *aheadPage) of(line string) bool { return a.line() != "" && a.line() == line }

// take returns the page read ahead, which the claim uses once.
func (a *aheadPage) take() []Ticket {
	ts := a.tickets
	a.tickets = nil
	return ts
}

// adoptAhead adds to the first lines the line of the page read ahead, when the locks did not take it:
// the page's statement locked its row after another claimer freed it. Left undecided, the line would
// make other claimers skip it with nothing to wake them for it.
func (c *claimRun) adoptAhead(ctx context.Context, lines []string) ([]string, error) {
	ahead := c.ahead.line()
	if ahead == "" || slices.Contains(lines, ahead) {
		return lines, nil
	}
	got, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit
		WHERE key = $2 FOR NO KEY UPDATE SKIP LOCKED`, ahead)
	if err != nil {
		return nil, err
	}
	c.took(now, folded)
	return append(got, lines...), nil
}

// firstLines is how many lines a claim locks first; each further chunk is twice the last, up to
// ClaimParams.MaxLines in all.
const firstLines = 4

// lockLines locks up to n lines with queued work after the key after (and up to upto, unless empty),
// skipping those other claimers hold, takes their pending releases and reads the clock (see
// lockAndTake), and returns their keys in key order.
func (c *claimRun) lockLines(ctx context.Context, after, upto string, n int) ([]string, error) {
	// The EXISTS is one index probe per limit row. The lines this claim has read already are left
	// out: SKIP LOCKED skips rows other transactions hold, never this one's, so the line adopted from
	// the page read ahead (adoptAhead), which lies past the first chunk's keys, would otherwise come
	// back in a later chunk and be read again, its admitted tickets still queued in the table.
	lines, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit l
		WHERE key > $3 AND ($4 = '' OR key <= $4) AND key <> ALL($5)
			AND EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued')
		ORDER BY key LIMIT $2 FOR NO KEY UPDATE OF l SKIP LOCKED`, n, after, upto, c.readLines())
	if err != nil {
		return nil, err
	}
	c.took(now, folded)
	for _, line := range lines {
		delete(c.unavailable, line) // held by another claimer when a ticket reached it, not now
	}
	return lines, nil
}

// readLines returns the lines this claim has read, never nil (a NULL array would make "<> ALL" NULL).
func (c *claimRun) readLines() []string {
	if c.lines == nil {
		return []string{}
	}
	return c.lines
}

// prelock locks, in one statement, the other limits that the first budget tickets of page draw on,
// before throttle decides on it: a line whose tickets each draw on a limit of their own (a tenant's
// cap) then costs a statement per page instead of one per ticket. At most budget of them can be
// admitted; the limits of tickets past them, reached when some are passed over, throttle still locks
// as it reaches them. A limit another claimer holds (or that does not exist) is unavailable, as
// throttle's own lock would have found it.
func (c *claimRun) prelock(ctx context.Context, page []Ticket) error {
	var keys []string
	for _, t := range page[:min(len(page), c.budget)] {
		for _, k := range t.LimitKeys {
			if c.locked[k] == nil && !c.unavailable[k] {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	got, now, err := c.lockOthers(ctx, keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, ok := got[k]; !ok {
			c.unavailable[k] = true
		}
	}
	c.took(now, false)
	return nil
}

// lockOthers locks the other limits a ticket draws on, as throttle reaches it, skipping those another
// claimer holds.
func (c *claimRun) lockOthers(ctx context.Context, keys []string) (map[string]admit.LimitState, time.Time, error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	locked, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit
		WHERE key = ANY($2) ORDER BY key FOR NO KEY UPDATE SKIP LOCKED`, slices.Compact(keys))
	if err != nil || len(locked) == 0 {
		return nil, time.Time{}, err
	}
	// Decisions from here on read the newly locked rows, with the clock read after their locks.
	c.folded = folded || c.folded
	got := make(map[string]admit.LimitState, len(locked))
	for _, k := range locked {
		r := c.locked[k]
		got[k] = admit.LimitState{Limit: r.limit, State: r.state}
	}
	return got, now, nil
}

// prefetchedPage is the first page of a line, read with its chunk of lines, and the size it was read
// with.
type prefetchedPage struct {
	tickets []Ticket
	size    int
}

// prefetch reads the first page of each of lines, but the line whose page was read ahead, in one
// statement: a claim over many short lines (tenants' lines) then costs a statement per chunk of lines
// rather than one per line. Each page is the budget's share of the chunk, at least 16 tickets; a line
// longer than its page is read on a page at a time, as any line is.
func (c *claimRun) prefetch(ctx context.Context, lines []string) error {
	want := make([]string, 0, len(lines))
	for _, l := range lines {
		if !c.ahead.of(l) {
			want = append(want, l)
		}
	}
	if len(want) < 2 {
		return nil // one line's page is one statement either way
	}
	size := min(max(c.budget/len(want)+1, 16), maxLineScan)
	ts, err := collectTickets(c.tx.Query(ctx, c.q.s(`SELECT t.* FROM unnest($1::text[]) AS l(key),
		LATERAL (SELECT `+ticketColumns+` FROM {s}.sluice_ticket WHERE line_key = l.key AND state = 'queued'
			ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED) t`), want, size))
	if err != nil {
		return err
	}
	if c.prefetched == nil {
		c.prefetched = make(map[string]prefetchedPage, len(want))
	}
	for _, l := range want {
		c.prefetched[l] = prefetchedPage{size: size}
	}
	for _, t := range ts { // in line order within each line
		p := c.prefetched[t.LineKey]
		p.tickets = append(p.tickets, t)
		c.prefetched[t.LineKey] = p
	}
	return nil
}
