package store

import (
	"context"
	"fmt"
)

// OwnerTickets returns owner's unfinished tickets (queued, admitted or running), in ID order, for its
// self-check: what Postgres says the owner holds, to hold against what the process holds. It reads
// the owner index; an owner's unfinished tickets are bounded by its MaxHeld.
func (q *Queue) OwnerTickets(ctx context.Context, owner string) ([]Ticket, error) {
	ts, err := collectTickets(q.pool.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE owner = $1 AND state IN ('queued', 'admitted', 'running') ORDER BY id`), owner))
	if err != nil {
		return nil, fmt.Errorf("sluice: read the unfinished tickets of %q: %w", owner, err)
	}
	return ts, nil
}

// TakeTickets moves those of ids that are owner's and admitted to running and returns them, as
// TakeAdmitted does for the oldest: the self-check takes by ID what the take loop left behind. A
// ticket taken meanwhile (by the take loop) is not returned.
func (q *Queue) TakeTickets(ctx context.Context, owner string, ids []int64) ([]Ticket, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ts, err := q.take(ctx, owner, len(ids), ids)
	if err != nil {
		return nil, fmt.Errorf("sluice: take tickets %v of %q: %w", ids, owner, err)
	}
	return ts, nil
}
