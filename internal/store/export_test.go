package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimAdoptingAhead runs a claim of p whose page read ahead (see Queue.readAhead) came from line rather
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
	c := q.newClaimRun(conn.Conn(), p, nil)
	c.ahead = &aheadPage{size: min(max(p.Max, 64), maxLineScan)}
	c.ahead.tickets, err = collectTickets(c.tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE line_key = $1 AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2 FOR UPDATE`), line, c.ahead.size))
	if err == nil {
		err = c.claimLines(ctx, "")
	}
	if err == nil {
		err = c.store(ctx)
	}
	if err != nil {
		c.tx.rollback(ctx)
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
	c := q.newClaimRun(conn.Conn(), ClaimParams{Owner: owner}.withDefaults(), nil)
	c.expired = expired
	for _, id := range admitted {
		c.admitted = append(c.admitted, admittedTicket{id: id, at: time.Now()})
	}
	for _, id := range waiting {
		c.waits = append(c.waits, waitChange{id: id, reason: "rate"})
	}
	rows, err := c.tx.Query(ctx, "SELECT 1") // begins the transaction
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err == nil {
		err = c.store(ctx)
	}
	if err != nil {
		c.tx.rollback(ctx)
	}
	return err
}

// AnalyzeTickets takes the planner's statistics of q's ticket table as it stands.
func AnalyzeTickets(ctx context.Context, q *Queue) error {
	_, err := q.pool.Exec(ctx, q.s(`ANALYZE {s}.sluice_ticket`))
	return err
}

// ExplainComplete returns the plan of the statement CompleteMany runs for tickets ids (delivered
// completions that report no usage), without running it.
func ExplainComplete(ctx context.Context, q *Queue, ids []int64) (string, error) {
	ps := make([]CompleteParams, len(ids))
	for i, id := range ids {
		ps[i] = CompleteParams{TicketID: id, ActualCost: -1, OutcomeKind: OutcomeCompleted, Delivered: true}
	}
	c, err := completeColumns(ps)
	if err != nil {
		return "", err
	}
	rows, err := q.pool.Query(ctx, `EXPLAIN `+q.s(completeSQL), c.ids, c.actual, c.kinds, c.outcomes, q.nowArg(),
		NotifyChannel, q.opts.Schema+"|"+kindReleased+"|", c.output, c.money, c.delivered)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// CompleteOrder returns the ticket IDs of ps in the order CompleteMany's statement locks them, and
// each one's position in ps.
func CompleteOrder(ps []CompleteParams) ([]int64, map[int64]int, error) {
	c, err := completeColumns(ps)
	return c.ids, c.index, err
}
