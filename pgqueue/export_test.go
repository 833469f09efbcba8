package pgqueue

import (
	"context"
	"time"
)

// ClaimAdoptingAhead runs a claim of p whose page read ahead (see Queue.claim) came from line rather
// than from the first line the claim locked: what happens when the lines before it were emptied by
// another claim that committed between this claim's locks and its page. The race is rare and timing
// bound; this makes it deterministic.
func ClaimAdoptingAhead(ctx context.Context, q *Queue, p ClaimParams, line string) (ClaimResult, error) {
	p = p.withDefaults()
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return ClaimResult{}, err
	}
	defer conn.Release()
	tx := &claimTx{conn: conn.Conn()}
	c := q.newClaimRun(tx, p)
	c.firstPage = min(max(p.Max, 64), maxLineScan)
	tx.ahead, err = collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE line_key = $1 AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE`), line, c.firstPage))
	if err == nil {
		err = c.claimLines(ctx, "")
	}
	if err == nil {
		err = c.store(ctx)
	}
	if err != nil {
		tx.rollback(ctx)
	}
	return c.res, err
}

// StoreClaim stores, as a claim's store does, decisions that no claim made: admitted (for owner),
// expired, and waiting (wait reason "rate"), with no limit rows. For tests of the store's own checks.
func StoreClaim(ctx context.Context, q *Queue, owner string, admitted, expired, waiting []int64) error {
	conn, err := q.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx := &claimTx{conn: conn.Conn()}
	c := q.newClaimRun(tx, ClaimParams{Owner: owner}.withDefaults())
	c.admittedIDs, c.expiredIDs, c.waitIDs = admitted, expired, waiting
	for range admitted {
		c.admittedAt = append(c.admittedAt, time.Now())
	}
	for range waiting {
		c.waitReasons = append(c.waitReasons, "rate")
	}
	rows, err := tx.Query(ctx, "SELECT 1") // begins the transaction
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err == nil {
		err = c.store(ctx)
	}
	if err != nil {
		tx.rollback(ctx)
	}
	return err
}
