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
//     admission or, when that is past, RunTime after now (a run past its expected end is taken to
//     have a typical run still to go);
//   - RunTime is, by Little's law, the tickets holding the limit divided by the rate the limit
//     admitted at over the trailing window of its usage history that holds its last 20 admissions
//     (at most an hour); not known when it admitted nothing in the hour or holds nothing now;
//   - UsedShare, the share of a reservation a run is expected to use (a release gives the rest back
//     to the token buckets), is the tokens the limit drew over that window net of the refunds of
//     reported usage, over those tokens and the refunds.
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
	limits, err := q.limitStates(ctx, tx, t.LimitKeys)
	if err != nil {
		return throttle.ExplainInput{}, err
	}
	in := throttle.ExplainInput{Ticket: t.candidate(), Limits: limits, Standing: map[string]throttle.Standing{}, Now: now}
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
	pace, err := q.recentPace(ctx, tx, key, now)
	if err != nil {
		return st, err
	}
	st.RunTime = pace.runTime(inflight, now)
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
			// A run past its expected end is taken to have a typical run still to go.
			if r.At = at.UTC().Add(st.RunTime); !r.At.After(now) {
				r.At = now.Add(st.RunTime)
			}
		}
		return r, err
	})
	st.UsedShare = pace.usedShare()
	return st, err
}

// paceAmong is how many admissions recentPace looks back for: the trailing window of the limit's
// usage history that holds that many (or the whole hour), so that the pace neither jumps when one
// admission leaves a fixed window nor rests on one or two.
const paceAmong = 20

// pace is what a limit admitted over a trailing window: requests, the tokens they drew net of the
// refunds of reported usage, and those refunds, since From.
type pace struct {
	From                       time.Time
	Requests, Tokens, Returned int64
}

// recentPace reads key's usage history back from now until it holds paceAmong admissions, at most an
// hour of it.
func (q *Queue) recentPace(ctx context.Context, tx pgx.Tx, key string, now time.Time) (pace, error) {
	rows, err := tx.Query(ctx, q.s(`SELECT second, requests, tokens, returned_input + returned_output FROM {s}.sluice_usage
		WHERE key = $1 AND second > $2 AND second <= $3 ORDER BY second DESC`), key, now.Add(-time.Hour), now)
	if err != nil {
		return pace{}, err
	}
	defer rows.Close()
	p := pace{From: now}
	for rows.Next() && p.Requests < paceAmong {
		var (
			at                         time.Time
			requests, tokens, returned int64
		)
		if err := rows.Scan(&at, &requests, &tokens, &returned); err != nil {
			return pace{}, err
		}
		p.From, p.Requests, p.Tokens, p.Returned = at, p.Requests+requests, p.Tokens+tokens, p.Returned+returned
	}
	return p, rows.Err()
}

// runTime is how long a ticket holds the limit, by Little's law: the inflight tickets holding it over
// the rate at which it admitted them over the pace's window (to now, at least a second). Zero, not
// known, when it admitted none in the hour or holds none now.
func (p pace) runTime(inflight int, now time.Time) time.Duration {
	if inflight <= 0 || p.Requests == 0 {
		return 0
	}
	window := max(now.Sub(p.From), time.Second)
	return time.Duration(float64(inflight) / float64(p.Requests) * float64(window))
}

// usedShare is the share of their reservations the runs used, over the pace's window: the tokens
// drawn net of refunds over those and the refunds (what was reserved), in all. Taken in all, not by
// dimension: a reservation given as one figure (input) with usage reported by dimension refunds
// input and takes output as debt, which only the sum reads right. Zero, not known, when nothing was
// reserved. The refunds of the window are those of the runs that ended in it, a run after their
// admissions: the share follows a change of usage a run late.
func (p pace) usedShare() float64 {
	reserved := p.Tokens + p.Returned
	if reserved <= 0 {
		return 0
	}
	return min(1, max(0, float64(p.Tokens)/float64(reserved)))
}
