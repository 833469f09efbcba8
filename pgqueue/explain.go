package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// TicketExplanation is a ticket and, while it waits for admission, why.
type TicketExplanation struct {
	Ticket Ticket `json:"ticket"`
	// Explanation is why the queued ticket waits, limit by limit, and when it is expected to be
	// admitted (throttle.Explain); nil for a ticket that is not queued.
	Explanation *throttle.Explanation `json:"explanation,omitempty"`
}

// explainAheadRead bounds the tickets ahead whose costs Explain reads on each limit; those beyond are
// counted, and taken at the mean cost of those read.
const explainAheadRead = 2000

// Explain returns ticket id and, when it is queued, why it waits and when it is expected to be
// admitted: throttle.Explain over the ticket's limits as the next claim will see them (pending
// releases folded in) and what stands on each, read in one snapshot that locks nothing:
//
//   - ahead on a limit are the queued tickets drawing on it (in any line) that sort before the ticket
//     by priority, fair-share start tag and arrival: on its line's limit, its line's order;
//   - a ticket holding a limit (admitted or running) is expected to release it RunTime after its
//     admission, or at once when that is past;
//   - RunTime is, by Little's law, the tickets holding the limit divided by the rate the limit
//     admitted at over the last minute (over the last hour if none in the minute); not known when it
//     admitted nothing in the hour.
//
// Finding the tickets ahead on a limit other than the line's reads every queued ticket: it is an
// operator's read, not one for a hot path. An unknown id returns an error wrapping ErrNotFound.
func (q *Queue) Explain(ctx context.Context, id int64) (TicketExplanation, error) {
	var out TicketExplanation
	err := q.snapshot(ctx, func(tx pgx.Tx) error {
		t, err := scanTicket(tx.QueryRow(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket WHERE id = $1`), id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: ticket %d", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		out = TicketExplanation{Ticket: t}
		if t.State != TicketStateQueued {
			return nil
		}
		in, err := q.explainInput(ctx, tx, t)
		if err != nil {
			return err
		}
		e := throttle.Explain(in)
		out.Explanation = &e
		return nil
	})
	if err != nil {
		return TicketExplanation{}, fmt.Errorf("sluice: explain ticket %d: %w", id, err)
	}
	return out, nil
}

// snapshot runs fn in a read-only transaction that sees one snapshot of the database.
func (q *Queue) snapshot(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := q.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// explainInput reads what throttle.Explain needs of queued ticket t.
func (q *Queue) explainInput(ctx context.Context, tx pgx.Tx, t Ticket) (throttle.ExplainInput, error) {
	now, err := q.now(ctx, tx)
	if err != nil {
		return throttle.ExplainInput{}, err
	}
	statuses, err := q.limitStatuses(ctx, tx, t.LimitKeys)
	if err != nil {
		return throttle.ExplainInput{}, err
	}
	in := throttle.ExplainInput{
		Ticket: throttle.Candidate{ID: t.ID, LimitKeys: t.LimitKeys, Cost: t.Cost, OutputCost: t.OutputCost,
			VStart: t.VStart, Deadline: t.Deadline, NotBefore: t.NotBefore},
		Limits:   map[string]throttle.LimitState{},
		Standing: map[string]throttle.Standing{},
		Now:      now,
	}
	for k, s := range statuses {
		in.Limits[k] = throttle.LimitState{Limit: s.Effective, State: s.State}
	}
	for _, k := range t.LimitKeys {
		if _, ok := in.Standing[k]; ok {
			continue
		}
		st, err := q.standing(ctx, tx, k, t, now, in.Limits[k].State.InflightCount)
		if err != nil {
			return throttle.ExplainInput{}, err
		}
		in.Standing[k] = st
	}
	return in, nil
}

// standing reads what stands between queued ticket t and limit key at now, on which inflight tickets
// are held (see Explain).
func (q *Queue) standing(ctx context.Context, tx pgx.Tx, key string, t Ticket, now time.Time, inflight int) (throttle.Standing, error) {
	var st throttle.Standing
	const ahead = ` FROM {s}.sluice_ticket WHERE state = 'queued' AND $1 = ANY(limit_keys) AND (priority, vstart, seq) < ($2, $3, $4)`
	args := []any{key, t.Priority, t.VStart, t.Seq}
	if err := tx.QueryRow(ctx, q.s(`SELECT count(*)`+ahead), args...).Scan(&st.AheadCount); err != nil {
		return st, err
	}
	rows, err := tx.Query(ctx, q.s(`SELECT cost, output_cost`+ahead+` ORDER BY priority, vstart, seq LIMIT `+fmt.Sprint(explainAheadRead)), args...)
	if err != nil {
		return st, err
	}
	st.Ahead, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (throttle.Cost, error) {
		var total, output int64
		err := row.Scan(&total, &output)
		return throttle.CostOf(total, output), err
	})
	if err != nil {
		return st, err
	}
	var minute, hour int64
	if err := tx.QueryRow(ctx, q.s(`SELECT coalesce(sum(requests) FILTER (WHERE second > $2), 0)::bigint, coalesce(sum(requests), 0)::bigint
		FROM {s}.sluice_usage WHERE key = $1 AND second > $3`), key, now.Add(-time.Minute), now.Add(-time.Hour)).Scan(&minute, &hour); err != nil {
		return st, err
	}
	st.RunTime = littleRunTime(inflight, minute, hour)
	rows, err = tx.Query(ctx, q.s(`SELECT admitted_at, cost, output_cost FROM {s}.sluice_ticket
		WHERE state IN ('admitted', 'running') AND $1 = ANY(limit_keys) LIMIT 10000`), key)
	if err != nil {
		return st, err
	}
	st.Releases, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (throttle.Release, error) {
		var (
			at            *time.Time
			total, output int64
		)
		err := row.Scan(&at, &total, &output)
		r := throttle.Release{Cost: throttle.CostOf(total, output)}
		if at != nil && st.RunTime > 0 {
			r.At = at.UTC().Add(st.RunTime)
		}
		return r, err
	})
	return st, err
}

// littleRunTime is how long a ticket holds a limit, by Little's law: the tickets holding it over the
// rate at which it admits them, measured over the last minute (requests in it), or the last hour when
// none in the minute. Zero, not known, when it admitted none in the hour or holds none now.
func littleRunTime(inflight int, minute, hour int64) time.Duration {
	switch {
	case inflight <= 0:
		return 0
	case minute > 0:
		return time.Duration(float64(inflight) / float64(minute) * float64(time.Minute))
	case hour > 0:
		return time.Duration(float64(inflight) / float64(hour) * float64(time.Hour))
	}
	return 0
}
