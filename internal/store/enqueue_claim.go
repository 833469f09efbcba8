package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// EnqueueClaiming writes the tickets of ps as EnqueueEach does and, in the same transaction, claims
// the lines they were written to that were empty (no ticket queued in them but these), as Claim does
// with p: a ticket whose line was empty and whose every limit has room is admitted by the commit that
// writes it. The tickets of p.Owner that it admits come back running in res.Admitted, for the caller
// to run at once, with no claim, take or notification between its write and its run: one commit on
// the activity's path where an enqueue and a claim took two. ps holds at most MaxEnqueueBatch tickets.
//
// It claims only those lines, and skips any that another claimer holds, as every claim does: a ticket
// left queued (its line had a backlog or is held, or a limit is full) is the claimers' to admit, and
// its line's claimers are notified at the commit, as after any enqueue. A line whose tickets were all
// admitted is not notified: there is nothing new to claim in it. p.Max bounds the admissions;
// p.MaxLines is not used (every empty line of ps is claimed).
//
// It costs two round trips: the BEGIN, the write, the locks of the lines and the first line's page
// in one; the decisions, the notification and the COMMIT in the other (a line that waits on other
// limits, or several lines, take a round trip more per page, as in Claim). ts and errs are as
// EnqueueEach's; err is the whole transaction's failure, when nothing was written or admitted, or
// wraps ErrCommitUnknown when the COMMIT's answer was lost.
func (q *Queue) EnqueueClaiming(ctx context.Context, ps []EnqueueParams, p ClaimParams) (ts []Ticket, errs []error, res ClaimResult, err error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return nil, nil, ClaimResult{}, err
	}
	if err := checkBatch("EnqueueClaiming", ps); err != nil {
		return nil, nil, ClaimResult{}, err
	}
	ts, errs, valid, at := validateEach(ps)
	if len(valid) == 0 {
		return ts, errs, ClaimResult{}, nil
	}
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, ClaimResult{}, fmt.Errorf("sluice: enqueue: %w", err)
	}
	defer conn.Release()
	lines := make([]string, 0, len(valid))
	for _, v := range valid {
		lines = append(lines, v.LimitKeys[0])
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)

	var written map[int]Ticket
	c := q.newClaimRun(conn.Conn(), p, q.readAheadOf(p, lines))
	sql, args := q.enqueueStatement(valid, false)
	c.tx.first = &sentWith{sql: sql, args: args, scan: func(rows pgx.Rows) (err error) {
		written, err = scanWritten(rows, len(valid))
		return err
	}}
	if err := c.runLines(ctx, lines, func() (string, []any) {
		// Sent with the COMMIT, after the claim's decisions: the notification of the lines in which
		// a ticket written here is still queued, and of every line when the claim passed a ticket over
		// for a limit another claimer held (Busy): no claimer waits for that ticket otherwise.
		return q.s(`SELECT count(pg_notify($1, $2 || l)) FROM unnest($3::text[]) AS l`),
			[]any{NotifyChannel, q.opts.Schema + "|" + kindWork + "|", c.linesLeft(lines, written)}
	}); err != nil {
		c.tx.rollback(ctx)
		return nil, nil, ClaimResult{}, fmt.Errorf("sluice: enqueue: %w", err)
	}
	placeWritten(ts, errs, valid, at, written)
	return ts, errs, c.res, nil
}

// readAheadOf is the page read ahead by a claim of lines: the first of them it claims, locked by the
// page's own statement (see readAhead).
func (q *Queue) readAheadOf(p ClaimParams, lines []string) *aheadPage {
	return q.aheadPageOf(p, `l.key = ANY($2) AND `+onlyOurs, lines)
}

// runLines claims lines, those of them no other claimer holds, and stores the decisions. notify
// gives a statement sent with the COMMIT, after the decisions (the first round trip has been read
// when it is called).
func (c *claimRun) runLines(ctx context.Context, lines []string, notify func() (string, []any)) error {
	got, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit l
		WHERE key = ANY($2) AND `+onlyOurs+` ORDER BY key FOR NO KEY UPDATE OF l SKIP LOCKED`, lines)
	if err != nil {
		return err
	}
	c.took(now, folded)
	if got, err = c.adoptAhead(ctx, got); err != nil {
		return err
	}
	if err := c.claimChunk(ctx, got); err != nil {
		return err
	}
	c.lines = got
	sql, args := notify()
	c.tx.last = &sentWith{sql: sql, args: args}
	if len(got) == 0 {
		return c.tx.commitWith(ctx, nil, "")
	}
	return c.store(ctx)
}

// linesLeft are the lines to wake after an enqueue's claim of lines: those of the tickets written
// that it did not admit, refuse or remove, or every line when it was Busy.
func (c *claimRun) linesLeft(lines []string, written map[int]Ticket) []string {
	if c.res.Busy {
		return lines
	}
	decided := make(map[int64]bool, len(c.res.Admitted)+len(c.res.Refused)+len(c.res.Expired))
	for _, ts := range [][]Ticket{c.res.Admitted, c.res.Refused, c.res.Expired} {
		for _, t := range ts {
			decided[t.ID] = true
		}
	}
	left := []string{}
	for _, t := range written {
		if !decided[t.ID] && !slices.Contains(left, t.LineKey) {
			left = append(left, t.LineKey)
		}
	}
	slices.Sort(left)
	return left
}

// onlyOurs holds for a line l whose queued tickets were all written by this transaction (their rows'
// xmin is its ID; a ticket another transaction wrote or changed since has another): an enqueue claims
// only lines it found empty. A line with a backlog is the claimers', which its notification wakes: a
// claim there would lock a page of tickets that wait, for each enqueue, to admit what the claimers
// admit anyway.
//
// The ORDER BY has the check read the line's index from its head, where a backlog's first ticket
// ends it, rather than scan the table for it.
const onlyOurs = `NOT EXISTS (SELECT 1 FROM {s}.sluice_ticket t
	WHERE t.line_key = l.key AND t.state = 'queued' AND t.xmin <> pg_current_xact_id()::xid
	ORDER BY t.priority, t.vstart, t.seq LIMIT 1)`
