package engine

import "context"

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
