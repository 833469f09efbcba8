package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// maxLineScan bounds how far into one line a claim reads past tickets held back by their other
// limits, so that a claim's cost stays bounded whatever the queue holds.
const maxLineScan = 1000

// Claim admits queued tickets, in line order, as far as every limit they draw on allows, in one short
// transaction. This is the throttled dequeue; run it from any number of processes.
//
// The rule that keeps it from ever over-admitting: each limit's row is locked (FOR NO KEY UPDATE SKIP
// LOCKED, so a line being claimed by another process is skipped rather than waited on, and an
// enqueue's KEY SHARE lock on the row neither waits for it nor makes it skip) before its in-flight
// figures and buckets are read, and written back in the same transaction. Every admission decision on a
// key is thus serialised, whichever replica makes it. A ticket drawing on several limits is admitted
// only when this transaction holds all their rows and each has room; the rows are locked in key order.
// Within a line the head waits for its own limit (so a large ticket is not starved by small ones behind
// it); a ticket held back only by another of its limits (a tenant's cap) is passed over, so one full
// tenant does not stall the line.
func (q *Queue) Claim(ctx context.Context, p ClaimParams) (ClaimResult, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return ClaimResult{}, err
	}
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("sluice: claim: %w", err)
	}
	defer conn.Release()
	// A claim reads the lines from where the last one of this Queue stopped at MaxLines, round the key
	// space, so that lines past MaxLines are reached even while the first ones wait.
	from := q.lineCursor()
	c := q.newClaimRun(conn.Conn(), p, q.readAhead(p, from))
	if err := c.run(ctx, from); err != nil {
		c.tx.rollback(ctx)
		return ClaimResult{}, fmt.Errorf("sluice: claim: %w", err)
	}
	return c.res, nil
}

// claimRun is one claim in progress: the rows it holds and what it has decided so far. throttle
// decides; claimRun reads the rows, locks them, and writes the decisions back.
type claimRun struct {
	q  *Queue
	tx *claimTx
	p  ClaimParams

	res         ClaimResult
	now         time.Time            // the instant of the next decision
	budget      int                  // tickets the claim may still admit
	locked      map[string]*limitRow // limit rows this claim holds
	unavailable map[string]bool      // limit rows another claimer holds
	ahead       *aheadPage           // the first line's page, read with the first locks; nil for none
	lines       []string             // the lines locked, in the order read
	prefetched  map[string]prefetchedPage
	atMaxLines  bool // the claim stopped at MaxLines, budget left

	// The decisions, as store writes them, and what it writes with them.
	admitted []admittedTicket
	expired  []int64 // tickets past their deadline, deleted
	refused  []refusedTicket
	waits    []waitChange    // tickets whose wait reason changed
	depths   []lineAdmitted  // the lines that admitted tickets, for their queue depth
	owners   map[string]bool // owners of the admitted tickets
	usage    usage           // what the admitted tickets draw, per key and second
	folded   bool            // pending releases were folded into locked rows
}

// newClaimRun starts a claim of p on conn, whose first round trip reads ahead (nil: reads nothing
// ahead).
func (q *Queue) newClaimRun(conn *pgx.Conn, p ClaimParams, ahead *aheadPage) *claimRun {
	return &claimRun{
		q: q, tx: newClaimTx(conn, ahead), p: p, budget: p.Max, ahead: ahead,
		res:    ClaimResult{Blocked: map[string]throttle.Reason{}, QueueDepth: map[string]int64{}},
		locked: map[string]*limitRow{}, unavailable: map[string]bool{},
		owners: map[string]bool{}, usage: usage{},
	}
}

// run claims the lines from the one after from, and stores the decisions.
func (c *claimRun) run(ctx context.Context, from string) error {
	if err := c.claimLines(ctx, from); err != nil {
		return err
	}
	// Only a claim that stopped at MaxLines moves the cursor: one that read every line, or whose
	// budget was spent, leaves the next to start from the first line, in one round trip.
	if len(c.lines) == 0 || !c.atMaxLines {
		c.q.setLineCursor("")
	} else {
		c.q.setLineCursor(c.lines[len(c.lines)-1])
	}
	if len(c.lines) == 0 {
		return c.commitCheckingBusy(ctx)
	}
	return c.store(ctx)
}

// claimLines locks lines a few at a time, as the budget needs them, and claims each: a claim filled
// by its first line (the common case) locks, and writes the lock of, one chunk only, and leaves the
// other lines to other claimers. It reads the lines after from, then wraps round to those up to it,
// MaxLines in all.
func (c *claimRun) claimLines(ctx context.Context, from string) error {
	after, upto := from, ""
	for chunk := min(firstLines, c.p.MaxLines); c.budget > 0; {
		lines, err := c.lockLines(ctx, after, upto, chunk)
		if err == nil && len(c.lines) == 0 {
			lines, err = c.adoptAhead(ctx, lines)
		}
		if err == nil {
			err = c.claimChunk(ctx, lines)
		}
		if err != nil {
			return err
		}
		c.lines = append(c.lines, lines...)
		switch left := c.p.MaxLines - len(c.lines); {
		case c.budget == 0:
			return nil
		case left <= 0: // below 0 when adoptAhead added a line to a full first chunk
			c.atMaxLines = true
			c.res.More = len(c.admitted) > 0 // lines it did not reach may have work
			return nil
		case len(lines) < chunk && (upto != "" || from == ""):
			return nil // every line read
		case len(lines) < chunk:
			after, upto, chunk = "", from, min(chunk, left) // wrap round
		default:
			after, chunk = lines[len(lines)-1], min(2*chunk, left)
		}
	}
	return nil
}

// claimChunk claims lines, a chunk this claim has locked, one after the other while budget is left,
// their first pages read together (prefetch).
func (c *claimRun) claimChunk(ctx context.Context, lines []string) error {
	if err := c.prefetch(ctx, lines); err != nil {
		return err
	}
	for _, line := range lines {
		if c.budget == 0 {
			return nil
		}
		if err := c.claimLine(ctx, line); err != nil {
			return err
		}
	}
	return nil
}

// commitCheckingBusy ends a claim that locked no line, committing a check of whether queued work
// exists all the same (other claimers hold every line): Busy. The check reads the line index in its order, so that it
// reads the index's first entry: a plain EXISTS may be planned as a scan of the table from its start,
// past every ticket claimed since the last vacuum.
func (c *claimRun) commitCheckingBusy(ctx context.Context) error {
	return c.tx.commitWith(ctx, func(pgx.Rows) error { c.res.Busy = true; return nil },
		c.q.s(`SELECT 1 FROM {s}.sluice_ticket WHERE state = 'queued' ORDER BY line_key, priority, vstart, seq LIMIT 1`))
}

// took records a statement that locked lines: the claim's decisions go on at its instant (never an
// earlier one), and the rows must be saved if it folded releases into them.
func (c *claimRun) took(now time.Time, folded bool) {
	c.now = later(c.now, now)
	c.res.Now, c.folded = c.now, c.folded || folded
}

// claimLine reads a line a page at a time and has throttle decide on each page. Tickets held back
// only by another of their limits (a full tenant) are passed over, so the claim reads on past them,
// up to maxLineScan tickets.
func (c *claimRun) claimLine(ctx context.Context, line string) error {
	before := len(c.admitted)
	var cursor *Ticket
	for scanned := 0; c.budget > 0 && scanned < maxLineScan; {
		page, pageSize, err := c.page(ctx, line, cursor, min(max(c.budget, 64), maxLineScan-scanned))
		if err != nil {
			return err
		}
		scanned += len(page)
		blocked, err := c.decide(ctx, line, page)
		if err != nil {
			return err
		}
		if blocked || len(page) < pageSize {
			break
		}
		cursor = &page[len(page)-1]
	}
	if n := len(c.admitted) - before; n > 0 {
		c.depths = append(c.depths, lineAdmitted{line: line, admitted: n})
	}
	return nil
}

// page locks and returns up to size queued tickets of line, in line order, after cursor, and the size
// the page was read with (the line ends before a page shorter than it): the page read ahead with the
// locks, or the one prefetched with its chunk of lines, when it is this one.
func (c *claimRun) page(ctx context.Context, line string, cursor *Ticket, size int) ([]Ticket, int, error) {
	if cursor == nil && c.ahead.of(line) && size == c.ahead.size {
		return c.ahead.take(), size, nil
	}
	if p, ok := c.prefetched[line]; ok && cursor == nil {
		delete(c.prefetched, line)
		return p.tickets, p.size, nil
	}
	var ts []Ticket
	var err error
	if cursor == nil {
		ts, err = collectTickets(c.tx.Query(ctx, c.q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
			WHERE line_key = $1 AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, size))
	} else {
		ts, err = collectTickets(c.tx.Query(ctx, c.q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
			WHERE line_key = $1 AND state = 'queued' AND (priority, vstart, seq) > ($3, $4, $5)
			ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, size, cursor.Priority, cursor.VStart, cursor.Seq))
	}
	return ts, size, err
}

// decide has throttle decide on a page of line and applies its decision. It reports whether the
// line's head waits for the line's own limit.
func (c *claimRun) decide(ctx context.Context, line string, page []Ticket) (bool, error) {
	if err := c.rereadAdmitted(line, page); err != nil {
		return false, err
	}
	if err := c.prelock(ctx, page); err != nil {
		return false, err
	}
	cands := make([]admit.Candidate, len(page))
	for i, t := range page {
		cands[i] = t.candidate()
	}
	held := make(map[string]admit.LimitState, len(c.locked))
	for k, r := range c.locked {
		held[k] = admit.LimitState{Limit: r.limit, State: r.state}
	}
	d, err := admit.DecideClaim(admit.ClaimPage{
		Line: line, Candidates: cands, Limits: held, Unavailable: c.unavailable,
		Lock:  func(keys []string) (map[string]admit.LimitState, time.Time, error) { return c.lockOthers(ctx, keys) },
		VTime: c.locked[line].vtime, Now: c.now, MinRemaining: c.p.MinRemaining, Budget: c.budget,
	})
	if err != nil {
		return false, err
	}
	c.apply(line, page, d)
	return d.Blocked != throttle.ReasonNone, nil
}

// apply records throttle's decision on a page of line, to be stored by store.
func (c *claimRun) apply(line string, page []Ticket, d admit.ClaimDecision) {
	c.now = d.Now
	c.budget -= len(d.Admitted)
	for _, k := range d.Unavailable {
		c.unavailable[k] = true
	}
	for k, s := range d.States {
		c.locked[k].state, c.locked[k].dirty = s, true
	}
	c.locked[line].vtime = d.VTime
	byID := make(map[int64]*Ticket, len(page))
	for i := range page {
		byID[page[i].ID] = &page[i]
	}
	for _, id := range d.Expired {
		c.expired = append(c.expired, id)
		c.res.Expired = append(c.res.Expired, *byID[id])
	}
	for _, r := range d.Refused {
		t := *byID[r.ID]
		t.State, t.FinishedAt, t.OutcomeKind, t.Outcome = TicketStateFinished, c.now, OutcomeRefused, encodeRefusal(r.Refusal)
		t.WaitReason = "allowance of " + r.Limit
		c.refused = append(c.refused, refusedTicket{id: t.ID, outcome: t.Outcome, key: r.Limit})
		c.res.Refused = append(c.res.Refused, t)
	}
	for _, a := range d.Admitted {
		t := *byID[a.ID]
		t.State, t.AdmittedAt = TicketStateAdmitted, a.At
		if c.p.Owner != "" && t.Owner == c.p.Owner {
			t.State = TicketStateRunning // the claimer runs it at once: no take, no notification
		} else {
			c.owners[t.Owner] = true
		}
		c.res.Admitted = append(c.res.Admitted, t)
		charged := c.charged(t)
		c.admitted = append(c.admitted, admittedTicket{id: t.ID, at: a.At, spends: len(charged) > 0, charged: jsonOrNull(charged)})
		c.usage.add(t.LimitKeys, a.At, t.Reserved())
	}
	for _, w := range d.Waits {
		// Written only when it changes, so that a line blocked for a long time costs no writes.
		if r := waitReason(w, line); r != byID[w.ID].WaitReason {
			c.waits = append(c.waits, waitChange{id: w.ID, reason: r})
		}
	}
	if d.Blocked != throttle.ReasonNone {
		c.res.Blocked[line] = d.Blocked
	}
	// A ticket passed over because another claimer held one of its limits (d.Busy) waits for that
	// claim's commit, which nothing notifies: it counts as waiting for a release, the next of which
	// is likely sooner than the poll.
	c.res.WaitsOnRelease = c.res.WaitsOnRelease || d.Busy || releaseLifts(d.Blocked) ||
		slices.ContainsFunc(d.Waits, func(w admit.Wait) bool { return releaseLifts(w.Reason) })
	c.res.retryAt(d.RetryAt)
	c.res.Busy = c.res.Busy || d.Busy
}

// waitReason is the wait reason stored for w, a wait in line: the reason's name, followed by " of "
// and the limit's key when a limit other than the line's holds the ticket ("concurrency of
// tenant:acme"), so that a line's head does not read as held by its line's limit.
func waitReason(w admit.Wait, line string) string {
	if w.Key == line {
		return w.Reason.String()
	}
	return w.Reason.String() + " of " + w.Key
}
