package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// maxLineScan bounds how far into one line a claim reads past tickets held back by their other
// limits, so that a claim's cost stays bounded whatever the queue holds.
const maxLineScan = 1000

// Claim admits queued tickets, in line order, as far as every limit they draw on allows, in one short
// transaction. This is the throttled dequeue; run it from any number of processes.
//
// The rule that keeps it from ever over-admitting: each limit's row is locked (FOR UPDATE SKIP LOCKED,
// so a line being claimed by another process is skipped rather than waited on) before its in-flight
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
	var res ClaimResult
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		var err error
		res, err = q.claim(ctx, tx, p)
		return err
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("sluice: claim: %w", err)
	}
	return res, nil
}

// claimRun is one claim in progress: the rows it holds and what it has decided so far. throttle
// decides; claimRun reads the rows, locks them, and writes the decisions back.
type claimRun struct {
	q  *Queue
	tx pgx.Tx
	p  ClaimParams

	res         ClaimResult
	now         time.Time            // the instant of the next decision
	budget      int                  // tickets the claim may still admit
	locked      map[string]*limitRow // limit rows this claim holds
	unavailable map[string]bool      // limit rows another claimer holds
	admittedIDs []int64
	admittedAt  []time.Time
	expiredIDs  []int64
	waits       map[string][]int64 // ticket IDs whose wait reason changed, by the new reason
	owners      map[string]bool    // owners of the admitted tickets
	folded      bool               // pending releases were folded into locked rows
}

func (q *Queue) claim(ctx context.Context, tx pgx.Tx, p ClaimParams) (ClaimResult, error) {
	c := &claimRun{
		q: q, tx: tx, p: p, budget: p.Max,
		res:    ClaimResult{Blocked: map[string]throttle.Reason{}, QueueDepth: map[string]int64{}},
		locked: map[string]*limitRow{}, unavailable: map[string]bool{},
		waits: map[string][]int64{}, owners: map[string]bool{},
	}
	lines, err := c.lockLines(ctx)
	if err != nil || len(lines) == 0 {
		return c.res, err
	}
	released, err := q.takeReleases(ctx, tx, c.locked)
	if err != nil {
		return c.res, err
	}
	// Read the clock after the locks are held and the releases taken: a decision never uses an
	// instant older than the state it reads (and Bucket.Refill ignores one that is).
	if c.now, err = q.now(ctx, tx); err != nil {
		return c.res, err
	}
	c.folded = foldReleases(c.locked, released, c.now)
	c.res.Now = c.now
	for _, line := range lines {
		if c.budget == 0 {
			break
		}
		if err := c.claimLine(ctx, line); err != nil {
			return c.res, err
		}
	}
	return c.res, c.store(ctx)
}

// lockLines locks up to MaxLines lines with queued work, skipping those other claimers hold, and
// returns their keys in key order. With none, it sets Busy if queued work exists all the same.
func (c *claimRun) lockLines(ctx context.Context) ([]string, error) {
	// The EXISTS is one index probe per limit row.
	rows, err := c.tx.Query(ctx, c.q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit l
		WHERE EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued')
		ORDER BY key LIMIT $1 FOR UPDATE OF l SKIP LOCKED`), c.p.MaxLines)
	if err != nil {
		return nil, err
	}
	var lines []string
	for rows.Next() {
		r, err := scanLimit(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		c.locked[r.limit.Key] = r
		lines = append(lines, r.limit.Key)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(lines) > 0 {
		return lines, err
	}
	// Either nothing is queued, or other claimers hold every line.
	err = c.tx.QueryRow(ctx, c.q.s(`SELECT EXISTS (SELECT 1 FROM {s}.sluice_ticket WHERE state = 'queued')`)).Scan(&c.res.Busy)
	return nil, err
}

// claimLine reads a line a page at a time and has throttle decide on each page. Tickets held back
// only by another of their limits (a full tenant) are passed over, so the claim reads on past them,
// up to maxLineScan tickets.
func (c *claimRun) claimLine(ctx context.Context, line string) error {
	before := len(c.admittedIDs)
	var cursor *Ticket
	for scanned := 0; c.budget > 0 && scanned < maxLineScan; {
		pageSize := min(max(c.budget, 64), maxLineScan-scanned)
		page, err := c.page(ctx, line, cursor, pageSize)
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
	if len(c.admittedIDs) == before {
		return nil
	}
	var depth int64
	if err := c.tx.QueryRow(ctx, c.q.s(`SELECT count(*) FROM (SELECT 1 FROM {s}.sluice_ticket
		WHERE line_key = $1 AND state = 'queued' LIMIT 1000) d`), line).Scan(&depth); err != nil {
		return err
	}
	c.res.QueueDepth[line] = depth - int64(len(c.admittedIDs)-before)
	return nil
}

// page locks and returns up to size queued tickets of line, in line order, after cursor.
func (c *claimRun) page(ctx context.Context, line string, cursor *Ticket, size int) ([]Ticket, error) {
	if cursor == nil {
		return collectTickets(c.tx.Query(ctx, c.q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
			WHERE line_key = $1 AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, size))
	}
	return collectTickets(c.tx.Query(ctx, c.q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE line_key = $1 AND state = 'queued' AND (priority, vstart, seq) > ($3, $4, $5)
		ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, size, cursor.Priority, cursor.VStart, cursor.Seq))
}

// decide has throttle decide on a page of line and applies its decision. It reports whether the
// line's head waits for the line's own limit.
func (c *claimRun) decide(ctx context.Context, line string, page []Ticket) (bool, error) {
	cands := make([]throttle.Candidate, len(page))
	for i, t := range page {
		cands[i] = throttle.Candidate{ID: t.ID, LimitKeys: t.LimitKeys, Cost: t.Cost, VStart: t.VStart,
			Deadline: t.Deadline, NotBefore: t.NotBefore}
	}
	held := make(map[string]throttle.LimitState, len(c.locked))
	for k, r := range c.locked {
		held[k] = throttle.LimitState{Limit: r.limit, State: r.state}
	}
	d, err := throttle.DecideClaim(throttle.ClaimPage{
		Line: line, Candidates: cands, Limits: held, Unavailable: c.unavailable,
		Lock:  func(keys []string) (map[string]throttle.LimitState, time.Time, error) { return c.lockOthers(ctx, keys) },
		VTime: c.locked[line].vtime, Now: c.now, MinRemaining: c.p.MinRemaining, Budget: c.budget,
	})
	if err != nil {
		return false, err
	}
	c.apply(line, page, d)
	return d.Blocked != throttle.ReasonNone, nil
}

// lockOthers locks the other limits a ticket draws on, as throttle reaches it, skipping those another
// claimer holds.
func (c *claimRun) lockOthers(ctx context.Context, keys []string) (map[string]throttle.LimitState, time.Time, error) {
	rows, err := c.q.lockLimits(ctx, c.tx, keys, true)
	if err != nil || len(rows) == 0 {
		return nil, time.Time{}, err
	}
	released, err := c.q.takeReleases(ctx, c.tx, rows)
	if err != nil {
		return nil, time.Time{}, err
	}
	// Decisions from here on read the newly locked rows: read the clock again, after their locks and
	// releases, as for the lines.
	now, err := c.q.now(ctx, c.tx)
	if err != nil {
		return nil, now, err
	}
	c.folded = foldReleases(rows, released, now) || c.folded
	got := make(map[string]throttle.LimitState, len(rows))
	for k, r := range rows {
		c.locked[k] = r
		got[k] = throttle.LimitState{Limit: r.limit, State: r.state}
	}
	return got, now, nil
}

// apply records throttle's decision on a page of line, to be stored by store.
func (c *claimRun) apply(line string, page []Ticket, d throttle.ClaimDecision) {
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
		c.expiredIDs = append(c.expiredIDs, id)
		c.res.Expired = append(c.res.Expired, *byID[id])
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
		c.admittedIDs = append(c.admittedIDs, t.ID)
		c.admittedAt = append(c.admittedAt, a.At)
	}
	for _, w := range d.Waits {
		// Written only when it changes, so that a line blocked for a long time costs no writes.
		if r := w.Reason.String(); r != byID[w.ID].WaitReason {
			c.waits[r] = append(c.waits[r], w.ID)
		}
	}
	if d.Blocked != throttle.ReasonNone {
		c.res.Blocked[line] = d.Blocked
	}
	c.res.retryAt(d.RetryAt)
	c.res.Busy = c.res.Busy || d.Busy
}

// store writes the claim's decisions: wait reasons, expired and admitted tickets, limit rows, and
// the admitted tickets' owners are notified.
func (c *claimRun) store(ctx context.Context) error {
	q, tx := c.q, c.tx
	for reason, ids := range c.waits {
		if _, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket SET wait_reason = $2 WHERE id = ANY($1)`), ids, reason); err != nil {
			return err
		}
	}
	if len(c.expiredIDs) > 0 {
		if _, err := tx.Exec(ctx, q.s(`DELETE FROM {s}.sluice_ticket WHERE id = ANY($1)`), c.expiredIDs); err != nil {
			return err
		}
	}
	// The limit rows change when tickets were admitted, or when pending releases were folded into
	// them (deleted from the ledger, so they must be saved).
	if len(c.admittedIDs) > 0 || c.folded {
		if err := q.saveLimits(ctx, tx, c.locked); err != nil {
			return err
		}
	}
	if len(c.admittedIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket t
		SET state = CASE WHEN $3 <> '' AND t.owner = $3 THEN 'running' ELSE 'admitted' END, admitted_at = u.at
		FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at) WHERE t.id = u.id`), c.admittedIDs, c.admittedAt, c.p.Owner); err != nil {
		return err
	}
	for _, o := range slices.Sorted(maps.Keys(c.owners)) {
		if err := q.notify(ctx, tx, kindAdmitted, o); err != nil {
			return err
		}
	}
	return nil
}
