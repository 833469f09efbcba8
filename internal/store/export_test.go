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
	n := len(ids)
	actual, output, money := make([]int64, n), make([]int64, n), make([]int64, n)
	kinds, outcomes, delivered := make([]string, n), make([][]byte, n), make([]bool, n)
	for i := range ids {
		actual[i], kinds[i], delivered[i] = -1, OutcomeCompleted, true
	}
	rows, err := q.pool.Query(ctx, `EXPLAIN `+q.s(completeSQL), ids, actual, kinds, outcomes, q.nowArg(),
		NotifyChannel, q.opts.Schema+"|"+kindReleased+"|", output, money, delivered)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}
