package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxCompleteBatch bounds the runs one CompleteMany completes.
const MaxCompleteBatch = 10_000

// CompleteParams describes a finished run.
type CompleteParams struct {
	// TicketID is the ticket, admitted or running. Required.
	TicketID int64
	// ActualCost is the usage the activity reported, reconciled against the reservation. Negative
	// means not reported: the reservation stands as spent.
	ActualCost int64
	// OutcomeKind and Outcome are stored for delivery to Temporal (an encoded result or failure).
	OutcomeKind string
	Outcome     []byte
}

// Complete releases a ticket's limits and records its outcome for delivery, in one transaction: the
// outcome is durable before anyone reports it, so it survives the process that ran the work. It
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

// CompleteMany completes several finished runs in one transaction, as Complete does one: the tickets
// are locked in ID order, each limit row they hold is locked once (in key order) and released and
// reconciled per ticket, the outcomes are written by one statement, and claimers are woken by one
// notification. It reports, in the order of ps, whether each ticket was completed: false when it is
// not admitted or running (handed back, or completed already). On error nothing is completed.
func (q *Queue) CompleteMany(ctx context.Context, ps []CompleteParams) ([]bool, error) {
	if len(ps) > MaxCompleteBatch {
		return nil, fmt.Errorf("sluice: complete: at most %d runs at once, got %d", MaxCompleteBatch, len(ps))
	}
	index := make(map[int64]int, len(ps))
	ids := make([]int64, len(ps))
	for i, p := range ps {
		if _, dup := index[p.TicketID]; dup {
			return nil, fmt.Errorf("sluice: complete: ticket %d is given twice", p.TicketID)
		}
		index[p.TicketID], ids[i] = i, p.TicketID
	}
	found := make([]bool, len(ps))
	if len(ps) == 0 {
		return found, nil
	}
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		clear(found) // a retried transaction starts over
		return q.completeTx(ctx, tx, ps, ids, index, found)
	})
	if err != nil {
		return nil, fmt.Errorf("sluice: complete %d runs: %w", len(ps), err)
	}
	return found, nil
}

func (q *Queue) completeTx(ctx context.Context, tx pgx.Tx, ps []CompleteParams, ids []int64, index map[int64]int, found []bool) error {
	ts, err := collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE id = ANY($1) AND state IN ('admitted', 'running') ORDER BY id FOR UPDATE`), ids))
	if err != nil || len(ts) == 0 {
		return err
	}
	n := len(ts)
	actual := make([]int64, n)
	done, stored := make([]int64, n), make([]*int64, n)
	kinds, outcomes := make([]string, n), make([][]byte, n)
	for i, t := range ts {
		p := ps[index[t.ID]]
		found[index[t.ID]] = true
		actual[i], done[i], kinds[i], outcomes[i] = p.ActualCost, t.ID, p.OutcomeKind, p.Outcome
		if p.ActualCost >= 0 {
			stored[i] = &p.ActualCost
		}
	}
	now, err := q.release(ctx, tx, ts, actual)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket t SET state = 'finished', finished_at = $2, deliver_after = $2,
			actual_cost = u.actual, outcome_kind = u.kind, outcome = u.outcome
		FROM unnest($1::bigint[], $3::bigint[], $4::text[], $5::bytea[]) AS u(id, actual, kind, outcome)
		WHERE t.id = u.id`), done, now, stored, kinds, outcomes)
	return err
}
