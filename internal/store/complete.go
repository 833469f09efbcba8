package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// MaxCompleteBatch bounds the runs one CompleteMany completes.
const MaxCompleteBatch = 10_000

// CompleteParams describes a finished run.
type CompleteParams struct {
	// TicketID is the ticket, admitted or running. Required.
	TicketID int64
	// ActualCost is the usage the activity reported, reconciled against the reservation. Negative
	// means not reported: the reservation stands as spent. A figure above MaxCost counts as MaxCost
	// (no call uses a trillion tokens: such a figure is a bug in what reported it, and Sluice's sums
	// must not overflow on it).
	ActualCost int64
	// ActualOutput is the part of ActualCost of output tokens (the rest is input), clamped to
	// [0, ActualCost]. Zero for usage reported as one figure.
	ActualOutput int64
	// ActualMoney is what the reported usage cost, in micro-units of the currency of the limits'
	// money allowances (a price table's Cost of the usage), reconciled against CostMoney. Zero (or
	// negative) means not known: with usage reported, the money reservation stands, unless no tokens
	// were used. (A call that used tokens at no cost reserved nothing either, so nothing is lost.) A
	// figure above throttle.MaxAllowanceAmount counts as that much.
	ActualMoney int64
	// OutcomeKind and Outcome are stored for delivery to Temporal (an encoded result or failure).
	OutcomeKind string
	Outcome     []byte
	// Delivered says Temporal has the outcome already: the runner reported it before recording,
	// so there is nothing left to deliver, and the ticket is deleted as it is completed rather
	// than kept finished for the deliverers (one write, no index entry, in place of an update to
	// finished and a later delete). A handed-back outcome is kept whatever Delivered says: its row
	// keeps the retry's place in line.
	Delivered bool
}

// Complete releases a ticket's limits and records its outcome for delivery, in one transaction (or,
// when Temporal has the outcome already, deletes the ticket): an outcome Temporal does not have is
// durable before it is reported again, so it survives the process that ran the work. It
// returns ErrNotFound when the ticket is not admitted or running (it was handed back, or completed).
func (q *Queue) Complete(ctx context.Context, p CompleteParams) error {
	found, err := q.CompleteMany(ctx, []CompleteParams{p})
	switch {
	case err != nil:
		return fmt.Errorf("sluice: complete ticket %d: %w", p.TicketID, errors.Unwrap(err))
	case !found[0]:
		return ErrNotFound
	}
	return nil
}

// CompleteMany completes several finished runs in one statement and one transaction, as Complete
// does one: the tickets are locked in ID order and their outcomes written, and what they release is
// appended, summed per limit, to the release ledger, which the next claim holding each limit row folds
// into it. A completion thus never locks a limit row: finishing work does not make claimers on the
// same key skip it or wait. One notification (TopicReleased) wakes the claimers that wait for room. It reports, in the order of ps,
// whether each ticket was completed: false when it is not admitted or running (handed back, or
// completed already). On error nothing is completed.
func (q *Queue) CompleteMany(ctx context.Context, ps []CompleteParams) ([]bool, error) {
	if len(ps) > MaxCompleteBatch {
		return nil, fmt.Errorf("sluice: complete: at most %d runs at once, got %d", MaxCompleteBatch, len(ps))
	}
	c, err := completeColumns(ps)
	if err != nil {
		return nil, err
	}
	found := make([]bool, len(ps))
	if len(ps) == 0 {
		return found, nil
	}
	// An explicit transaction, though the work is one statement: a statement cancelled after the
	// server ran it on its own would have committed while its caller heard an error, and a
	// completion answered as failed must not be recorded.
	err = InTx(ctx, q.pool, func(tx pgx.Tx) error {
		clear(found)
		rows, err := tx.Query(ctx, q.s(completeSQL), c.ids, c.actual, c.kinds, c.outcomes, q.nowArg(),
			NotifyChannel, q.opts.Schema+"|"+kindReleased+"|", c.output, c.money, c.delivered)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			found[c.index[id]] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sluice: complete %d runs: %w", len(ps), err)
	}
	return found, nil
}

// completeCols are CompleteMany's runs as completeSQL's array parameters, sorted by ticket ID (the
// order the statement locks them in), and index, each ticket's position in the runs as given.
type completeCols struct {
	ids, actual, output, money []int64
	kinds                      []string
	outcomes                   [][]byte
	delivered                  []bool
	index                      map[int64]int
}

// completeColumns turns ps into completeSQL's columns, refusing a ticket given twice.
func completeColumns(ps []CompleteParams) (completeCols, error) {
	n := len(ps)
	c := completeCols{ids: make([]int64, n), actual: make([]int64, n), output: make([]int64, n), money: make([]int64, n),
		kinds: make([]string, n), outcomes: make([][]byte, n), delivered: make([]bool, n), index: make(map[int64]int, n)}
	byID := make([]int, n)
	for i := range byID {
		byID[i] = i
	}
	slices.SortFunc(byID, func(a, b int) int { return cmp.Compare(ps[a].TicketID, ps[b].TicketID) })
	for i, at := range byID {
		p := ps[at]
		if _, dup := c.index[p.TicketID]; dup {
			return completeCols{}, fmt.Errorf("sluice: complete: ticket %d is given twice", p.TicketID)
		}
		c.index[p.TicketID] = at
		u := completeUsage(p)
		c.ids[i], c.actual[i], c.output[i], c.money[i], c.kinds[i], c.outcomes[i] = p.TicketID, u.total, u.output, u.money, p.OutcomeKind, p.Outcome
		c.delivered[i] = p.Delivered && p.OutcomeKind != OutcomeHandedBack
	}
	return c, nil
}

// completeSQL completes a batch of runs: $1 the ticket IDs, $2 the usage each reported (negative:
// none) and $8 its part of output tokens (in [0, $2]), $9 its cost in money (negative: not known), $3 and $4 the outcomes, $5 the instant (NULL:
// the database clock), $6 and $7 the notification, $10 whether Temporal has each outcome already. The
// finished CTE keeps for delivery the outcomes Temporal does not have; removed deletes the tickets
// whose outcome it has; done is both, what the batch completed. The released CTE appends what the batch released
// to the release ledger (releaseAppendSQL, with the rest of a ticket's release in release.go),
// allowances_released what reported usage reconciles on allowances (allowanceAppendSQL), and
// run_times how long each run held its limits (runTimeAppendSQL).
// The locked CTE takes the ticket locks in ID order, as every statement that locks several tickets
// does, so that two of them cannot deadlock: CompleteMany sends the runs sorted by ticket ID, and
// each is locked in its turn as unnest returns them, in the arrays' order.
//
// Each ticket is found by a probe of the primary key, in a LATERAL subquery that its FOR UPDATE (and,
// should that change, OFFSET 0) keeps the planner from merging into a join (a queued ticket, put back in line, is neither locked nor waited
// for; the state is tested again on the locked row, the latest version, after any wait for its
// lock). As a join, with statistics taken while every ticket was queued, the planner estimated one
// row for "state <> 'queued'" and scanned the whole table, reading the input once per row it found:
// quadratic, 124 ms of a completion of 100 runs at 8 replicas. "state IN ('admitted', 'running')"
// in the join had done the same through an index of the states.
var completeSQL = `WITH clock AS MATERIALIZED (
	SELECT coalesce($5::timestamptz, clock_timestamp()) AS now -- once: the batch's one instant
), locked AS MATERIALIZED (
	SELECT t.id, t.state, u.actual, u.actual_output, u.actual_money, u.kind, u.outcome, u.delivered
	FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[], $8::bigint[], $9::bigint[], $10::boolean[])
		AS u(id, actual, kind, outcome, actual_output, actual_money, delivered)
	CROSS JOIN LATERAL (
		SELECT id, state FROM {s}.sluice_ticket WHERE id = u.id AND state <> 'queued' OFFSET 0 FOR UPDATE
	) t
), finished AS (
	UPDATE {s}.sluice_ticket t SET state = 'finished', finished_at = n.now, deliver_after = n.now,
		actual_cost = CASE WHEN l.actual >= 0 THEN l.actual END,
		actual_output = CASE WHEN l.actual >= 0 THEN l.actual_output END, outcome_kind = l.kind, outcome = l.outcome,
		actual_money = CASE WHEN l.actual >= 0 AND l.actual_money >= 0 THEN l.actual_money END
	FROM locked l, clock n
	WHERE t.id = l.id AND l.state IN ('admitted', 'running') AND NOT l.delivered
	RETURNING t.id, t.cost, t.output_cost, t.cost_money, t.limit_keys, t.admitted_at, t.allowance_spend, t.allowance_charged,
		t.finished_at, l.actual, l.actual_output, l.actual_money
), removed AS (
	DELETE FROM {s}.sluice_ticket t USING locked l, clock n
	WHERE t.id = l.id AND l.state IN ('admitted', 'running') AND l.delivered
	RETURNING t.id, t.cost, t.output_cost, t.cost_money, t.limit_keys, t.admitted_at, t.allowance_spend, t.allowance_charged,
		n.now AS finished_at, l.actual, l.actual_output, l.actual_money
), done AS (
	SELECT * FROM finished UNION ALL SELECT * FROM removed
), released AS (` + releaseAppendSQL + `
), allowances_released AS (` + allowanceAppendSQL + `
), run_times AS (` + runTimeAppendSQL + `
), woken AS (
	SELECT count(pg_notify($6, $7 || key)) AS n FROM (SELECT key FROM released ORDER BY key LIMIT 1) r
)
SELECT id FROM done, woken`

// runTimeAppendSQL records, for each limit key of the tickets of the CTE done that were admitted, how
// long each held it: from its admission to its completion (done.finished_at, the batch's instant), in
// milliseconds, as one row of sluice_run_time per key. Explain reads a key's recent rows for the
// distribution of its run times (recentRuns). Only completions record: a requeue, a cancel or a
// hand-back is no run that ended.
const runTimeAppendSQL = `
	INSERT INTO {s}.sluice_run_time (key, ended_at, run_ms)
	SELECT k, min(d.finished_at), array_agg(least(greatest(round(extract(epoch FROM d.finished_at - d.admitted_at) * 1000), 0),
		2147483647)::integer ORDER BY d.id)
	FROM done d, unnest(d.limit_keys) AS k WHERE d.admitted_at IS NOT NULL GROUP BY k ORDER BY k
	RETURNING key`

// completeUsage is what a completion reports its run used, as completeSQL takes it: tokens bounded
// (boundUsage), negative when not reported; the output part clamped to [0, total] (0 when not
// reported); money bounded, and -1 when not known (zero or negative). The allowance ledger's columns
// (allowanceSpendColumns) are runUsage.spendRelease of it.
func completeUsage(p CompleteParams) runUsage {
	total, money := boundUsage(p.ActualCost, p.ActualMoney)
	used, _ := admit.ReportedUsage(total, p.ActualOutput)
	if money <= 0 {
		money = -1
	}
	return runUsage{total: total, output: used.Output, money: money}
}

// boundUsage bounds reported usage where it enters the engine: tokens at MaxCost (the bound of a
// reservation) and money at throttle.MaxAllowanceAmount, so that no sum over them overflows. The
// plugin's sluiceactivity refuses larger reports with an error; this is the engine's own guard, for
// every other caller.
func boundUsage(tokens, money int64) (int64, int64) {
	return min(tokens, MaxCost), min(money, throttle.MaxAllowanceAmount)
}
