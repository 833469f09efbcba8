package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// maxLineScan bounds how far into one line a claim reads past tickets held back by their other
// limits, so that a claim's cost stays bounded whatever the queue holds.
const maxLineScan = 1000

// Defaults and bounds of ClaimParams.
const (
	DefaultClaimMax      = 100
	DefaultClaimMaxLines = 32
)

// ClaimParams bounds one claim.
type ClaimParams struct {
	// Max is the most tickets admitted by the claim, over all lines. Defaults to DefaultClaimMax.
	Max int
	// MaxLines is the most lines (limit keys with queued tickets) one claim locks. Claimers racing on
	// many keys thus split them between themselves instead of one taking all. Defaults to
	// DefaultClaimMaxLines.
	MaxLines int
	// MinRemaining skips tickets whose deadline is closer than this: admitting them would spend quota
	// on work Temporal is about to time out. They are removed. Defaults to 0.
	MinRemaining time.Duration
}

func (p ClaimParams) withDefaults() ClaimParams {
	p.Max = cmp.Or(p.Max, DefaultClaimMax)
	p.MaxLines = cmp.Or(p.MaxLines, DefaultClaimMaxLines)
	return p
}

func (p ClaimParams) validate() error {
	if p.Max < 0 || p.Max > 10_000 {
		return fmt.Errorf("sluice: ClaimParams.Max must be in [1, 10000], got %d", p.Max)
	}
	if p.MaxLines < 0 || p.MaxLines > 10_000 {
		return fmt.Errorf("sluice: ClaimParams.MaxLines must be in [1, 10000], got %d", p.MaxLines)
	}
	if p.MinRemaining < 0 {
		return fmt.Errorf("sluice: ClaimParams.MinRemaining must be >= 0, got %s", p.MinRemaining)
	}
	return nil
}

// ClaimResult is what one claim did.
type ClaimResult struct {
	// Admitted are the tickets admitted, now in state admitted; their owners were notified.
	Admitted []Ticket
	// Expired are queued tickets removed because their deadline passed (or was closer than
	// MinRemaining): Temporal has timed them out, so there is nothing to report.
	Expired []Ticket
	// Blocked gives, for each line this claim looked at and stopped on, why its head waits.
	Blocked map[string]throttle.Reason
	// RetryAt is the earliest instant at which a line blocked by a rate, a token budget, a pause or a
	// not-before time could admit again. Zero when no line is waiting on time alone (a release of
	// running work, which is notified, is what unblocks it), or when no line was looked at.
	RetryAt time.Time
	// Busy reports that lines with queued work were skipped because another claimer held them.
	Busy bool
	// QueueDepth is, for each line that admitted tickets, how many were still queued in it after the
	// claim, counted up to 1,000 so that the count stays as cheap as the claim.
	QueueDepth map[string]int64
	// Now is the database instant of the claim's decisions: wait RetryAt.Sub(Now), so that clock skew
	// between this process and the database does not matter.
	Now time.Time
}

func (r *ClaimResult) retryAt(t time.Time) {
	if !t.IsZero() && (r.RetryAt.IsZero() || t.Before(r.RetryAt)) {
		r.RetryAt = t
	}
}

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

func (q *Queue) claim(ctx context.Context, tx pgx.Tx, p ClaimParams) (ClaimResult, error) {
	res := ClaimResult{Blocked: map[string]throttle.Reason{}, QueueDepth: map[string]int64{}}
	// Lines with queued work, locked. The EXISTS is one index probe per limit row.
	rows, err := tx.Query(ctx, q.s(`SELECT `+limitColumns+` FROM {s}.sluice_limit l
		WHERE EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued')
		ORDER BY key LIMIT $1 FOR UPDATE OF l SKIP LOCKED`), p.MaxLines)
	if err != nil {
		return res, err
	}
	locked := map[string]*limitRow{}
	var lines []string
	for rows.Next() {
		r, err := scanLimit(rows)
		if err != nil {
			rows.Close()
			return res, err
		}
		locked[r.limit.Key] = r
		lines = append(lines, r.limit.Key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	if len(lines) == 0 {
		// Either nothing is queued, or other claimers hold every line.
		var queued bool
		if err := tx.QueryRow(ctx, q.s(`SELECT EXISTS (SELECT 1 FROM {s}.sluice_ticket WHERE state = 'queued')`)).Scan(&queued); err != nil {
			return res, err
		}
		res.Busy = queued
		return res, nil
	}
	// Read the clock after the locks are held: a decision never uses an instant older than the state
	// it reads (and Bucket.Refill ignores one that is).
	now, err := q.now(ctx, tx)
	if err != nil {
		return res, err
	}
	res.Now = now
	failed := map[string]bool{} // limit rows another claimer holds
	var admittedIDs, expiredIDs []int64
	var admittedAt []time.Time
	owners := map[string]bool{}
	budget := p.Max
	waits := map[string][]int64{}
	noteWait := func(id int64, was string, r throttle.Reason) {
		if was != r.String() {
			waits[r.String()] = append(waits[r.String()], id)
		}
	}
	for _, line := range lines {
		countBefore := len(admittedIDs)
		if budget == 0 {
			break
		}
		lineAdmitted := false
		// Read the line a page at a time: tickets held back only by another of their limits (a full
		// tenant) are passed over, so the claim reads on past them, up to maxLineScan tickets.
		var cursor *Ticket
		for scanned := 0; budget > 0 && scanned < maxLineScan; {
			pageSize := min(max(budget, 64), maxLineScan-scanned)
			var cands []Ticket
			if cursor == nil {
				cands, err = collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
					WHERE line_key = $1 AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, pageSize))
			} else {
				cands, err = collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
					WHERE line_key = $1 AND state = 'queued' AND (priority, vstart, seq) > ($3, $4, $5)
					ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE SKIP LOCKED`), line, pageSize, cursor.Priority, cursor.VStart, cursor.Seq))
			}
			if err != nil {
				return res, err
			}
			scanned += len(cands)
			lineBlocked := false
		tickets:
			for i, t := range cands {
				if budget == 0 {
					break
				}
				if !t.Deadline.IsZero() && !now.Add(p.MinRemaining).Before(t.Deadline) {
					expiredIDs = append(expiredIDs, t.ID)
					res.Expired = append(res.Expired, t)
					continue
				}
				if now.Before(t.NotBefore) {
					res.retryAt(t.NotBefore)
					continue
				}
				// Lock the other limits the ticket draws on, if this claim does not hold them yet.
				var missing []string
				for _, k := range t.LimitKeys {
					if locked[k] == nil && !failed[k] {
						missing = append(missing, k)
					}
				}
				if len(missing) > 0 {
					got, err := q.lockLimits(ctx, tx, missing, true)
					if err != nil {
						return res, err
					}
					for _, k := range missing {
						if r := got[k]; r != nil {
							locked[k] = r
						} else {
							failed[k] = true
						}
					}
					if len(got) > 0 {
						// Decisions from here on read the newly locked rows: read the clock again, after
						// their locks, as for the lines.
						if now, err = q.now(ctx, tx); err != nil {
							return res, err
						}
					}
				}
				for _, k := range t.LimitKeys {
					if failed[k] {
						res.Busy = true
						continue tickets
					}
				}
				for _, k := range t.LimitKeys {
					r := locked[k]
					d := r.limit.Check(r.state, now, t.Cost)
					if d.OK() {
						continue
					}
					if k == line {
						res.Blocked[line] = d.Reason
						res.retryAt(d.RetryAt)
						// The head waits for its line's own limit: say why, for the wait span.
						for _, w := range cands[i:] {
							noteWait(w.ID, w.WaitReason, d.Reason)
						}
						lineBlocked = true
						break tickets
					}
					res.retryAt(d.RetryAt)
					noteWait(t.ID, t.WaitReason, d.Reason)
					continue tickets
				}
				for _, k := range t.LimitKeys {
					r := locked[k]
					r.state = r.limit.Admit(r.state, now, t.Cost)
					r.dirty = true
				}
				lr := locked[line]
				lr.vtime = max(lr.vtime, t.VStart)
				t.State, t.AdmittedAt = TicketStateAdmitted, now
				res.Admitted = append(res.Admitted, t)
				admittedIDs = append(admittedIDs, t.ID)
				admittedAt = append(admittedAt, now)
				owners[t.Owner] = true
				budget--
				lineAdmitted = true
			}
			if lineBlocked || len(cands) < pageSize {
				break
			}
			cursor = &cands[len(cands)-1]
		}
		if lineAdmitted {
			var depth int64
			if err := tx.QueryRow(ctx, q.s(`SELECT count(*) FROM (SELECT 1 FROM {s}.sluice_ticket
				WHERE line_key = $1 AND state = 'queued' LIMIT 1000) d`), line).Scan(&depth); err != nil {
				return res, err
			}
			res.QueueDepth[line] = depth - int64(len(admittedIDs)-countBefore)
		}
	}
	for reason, ids := range waits {
		// Written only when it changes, so that a line blocked for a long time costs no writes.
		if _, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket SET wait_reason = $2 WHERE id = ANY($1)`), ids, reason); err != nil {
			return res, err
		}
	}
	if len(expiredIDs) > 0 {
		if _, err := tx.Exec(ctx, q.s(`DELETE FROM {s}.sluice_ticket WHERE id = ANY($1)`), expiredIDs); err != nil {
			return res, err
		}
	}
	if len(admittedIDs) == 0 {
		return res, nil
	}
	if _, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket t SET state = 'admitted', admitted_at = u.at
		FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at) WHERE t.id = u.id`), admittedIDs, admittedAt); err != nil {
		return res, err
	}
	if err := q.saveLimits(ctx, tx, locked); err != nil {
		return res, err
	}
	sorted := make([]string, 0, len(owners))
	for o := range owners {
		sorted = append(sorted, o)
	}
	slices.Sort(sorted)
	for _, o := range sorted {
		if err := q.notify(ctx, tx, kindAdmitted, o); err != nil {
			return res, err
		}
	}
	return res, nil
}

// now is the instant of a decision: the injected clock, or the database's.
func (q *Queue) now(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	if q.opts.Now != nil {
		return q.opts.Now(), nil
	}
	var now time.Time
	err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now.UTC(), err
}
