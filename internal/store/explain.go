package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// TicketExplanation is a ticket and, while it waits for admission, why.
type TicketExplanation struct {
	Ticket Ticket `json:"ticket"`
	// Explanation is why the queued ticket waits, limit by limit, and when it is expected to be
	// admitted (admit.Explain); nil for a ticket that is not queued.
	Explanation *throttle.Explanation `json:"explanation,omitempty"`
}

// explainAheadRead bounds the tickets ahead whose costs Explain reads on each limit; those beyond are
// counted, and taken at the mean cost of those read.
const explainAheadRead = 2000

// Explain returns ticket id and, when it is queued, why it waits and when it is expected to be
// admitted: admit.Explain over the ticket's limits as the next claim will see them (pending
// releases folded in) and what stands on each, read in one snapshot that locks nothing:
//
//   - ahead on a limit are the queued tickets drawing on it (in any line) that sort before the ticket
//     by priority, fair-share start tag and arrival (on its line's limit, its line's order), and
//     that no other of their limits holds back now: a ticket ahead that a full tenant holds is not
//     admitted first on this limit's account. Those beyond the 2,000 read are taken to be held
//     back in the same share;
//   - run times are measured: how long the limit's runs that ended in the last hour held it, from
//     admission to completion (sluice_run_time, the newest 200); the typical run is their median,
//     its likely range their quartiles. Not known when no run ended in the hour;
//   - a ticket holding a limit (admitted or running) is expected to release it after the time still
//     to go of the recent runs that lasted longer than it has so far, and by its deadline at the
//     latest; one that has run longer than every recent run is overdue: expected by its deadline,
//     or, with none, never counted on (admit.Release.Since);
//   - UsedShare, the share of a reservation a run is expected to use (a release gives the rest back
//     to the token buckets), is the tokens the limit drew over the trailing window of its usage
//     history that holds its last 20 admissions (at most an hour), net of the refunds of reported
//     usage, over those tokens and the refunds; UsedShareOutput the same of the output tokens alone,
//     when output was reserved in that window.
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
		e := admit.Explain(in)
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

// explainInput reads what admit.Explain needs of queued ticket t.
func (q *Queue) explainInput(ctx context.Context, tx pgx.Tx, t Ticket) (admit.ExplainInput, error) {
	now, err := q.now(ctx, tx)
	if err != nil {
		return admit.ExplainInput{}, err
	}
	limits, err := q.limitStates(ctx, tx, t.LimitKeys)
	if err != nil {
		return admit.ExplainInput{}, err
	}
	in := admit.ExplainInput{Ticket: t.candidate(), Limits: limits, Standing: map[string]admit.Standing{}, Now: now}
	others := maps.Clone(limits) // the limits of the tickets ahead, read as they are needed
	for _, k := range t.LimitKeys {
		if _, ok := in.Standing[k]; ok {
			continue
		}
		st, err := q.standing(ctx, tx, k, t, now, others)
		if err != nil {
			return admit.ExplainInput{}, err
		}
		in.Standing[k] = st
	}
	return in, nil
}

// standing reads what stands between queued ticket t and limit key at now (see Explain). others
// holds the limits read so far, by key; standing adds those of the tickets ahead.
func (q *Queue) standing(ctx context.Context, tx pgx.Tx, key string, t Ticket, now time.Time, others map[string]admit.LimitState) (admit.Standing, error) {
	var st admit.Standing
	const ahead = ` FROM {s}.sluice_ticket WHERE state = 'queued' AND $1 = ANY(limit_keys) AND (priority, vstart, seq) < ($2, $3, $4)`
	args := []any{key, t.Priority, t.VStart, t.Seq}
	if err := tx.QueryRow(ctx, q.s(`SELECT count(*)`+ahead), args...).Scan(&st.AheadCount); err != nil {
		return st, err
	}
	ts, err := collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+ahead+` ORDER BY priority, vstart, seq LIMIT `+
		fmt.Sprint(explainAheadRead)), args...))
	if err != nil {
		return st, err
	}
	if st.Ahead, err = q.aheadOn(ctx, tx, key, ts, now, others); err != nil {
		return st, err
	}
	if read := len(ts); read > 0 {
		held := read - len(st.Ahead)
		// Those not read are held back elsewhere as often as those read.
		st.HeldElsewhere = held + (st.AheadCount-read)*held/read
	}
	runs, err := q.recentRuns(ctx, tx, key, now)
	if err != nil {
		return st, err
	}
	st.RunTime = runs.Typical()
	holders, err := collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE state IN ('admitted', 'running') AND $1 = ANY(limit_keys) LIMIT 10000`), key))
	if err != nil {
		return st, err
	}
	for _, h := range holders {
		st.Releases = append(st.Releases, expectedRelease(h, runs, now))
	}
	pace, err := q.recentPace(ctx, tx, key, now)
	if err != nil {
		return st, err
	}
	st.UsedShare, st.UsedShareOutput = pace.usedShare(), pace.usedShareOutput()
	return st, nil
}

// aheadOn returns the reservations of the tickets ts, queued ahead of the explained ticket on key,
// that no other of their limits holds back at now: a ticket ahead that a full tenant holds is not
// admitted before the explained ticket on key's account. others caches the limits read.
func (q *Queue) aheadOn(ctx context.Context, tx pgx.Tx, key string, ts []Ticket, now time.Time, others map[string]admit.LimitState) ([]throttle.Cost, error) {
	var missing []string
	for _, a := range ts {
		for _, k := range a.LimitKeys {
			if _, ok := others[k]; !ok && !slices.Contains(missing, k) {
				missing = append(missing, k)
			}
		}
	}
	if len(missing) > 0 {
		read, err := q.limitStates(ctx, tx, missing)
		if err != nil {
			return nil, err
		}
		for _, k := range missing {
			others[k] = read[k] // a limit that does not exist holds its tickets back: a zero LimitState admits nothing
		}
	}
	out := make([]throttle.Cost, 0, len(ts))
	for _, a := range ts {
		sp := throttle.Spend{Tokens: a.Reserved(), Money: a.CostMoney}
		held := slices.ContainsFunc(a.LimitKeys, func(k string) bool {
			ls, ok := others[k]
			return k != key && (!ok || ls.Limit.Key == "" || !ls.Limit.WithDefaults().CheckSpend(ls.State, now, sp).OK())
		})
		if !held {
			out = append(out, a.Reserved())
		}
	}
	return out, nil
}

// expectedRelease is when ticket h, which holds a limit, is expected to release it at now, given
// the limit's recent run times: after the time still to go of the runs that lasted longer than h has
// run so far (admit.RunTimes.Remaining), and by h's deadline at the latest. A holder that has run
// longer than every recent run is overdue: it is expected by its deadline (or, with none, never
// counted on). With no recent runs its release is not known.
func expectedRelease(h Ticket, runs admit.RunTimes, now time.Time) admit.Release {
	r := admit.Release{Cost: h.Reserved()}
	if h.AdmittedAt.IsZero() || len(runs) == 0 {
		return r
	}
	deadline := h.Deadline
	if !deadline.IsZero() && deadline.Before(now) {
		deadline = now // past it: Temporal ends the run any moment
	}
	span, ok := runs.Remaining(max(now.Sub(h.AdmittedAt), 0))
	if !ok {
		r.Since = h.AdmittedAt.UTC()
		if !deadline.IsZero() {
			r.At, r.Early, r.Late = deadline, now, deadline
		}
		return r
	}
	bound := func(at time.Time) time.Time {
		if !deadline.IsZero() && at.After(deadline) {
			return deadline
		}
		return at
	}
	r.At, r.Early, r.Late = bound(now.Add(span.Mid)), bound(now.Add(span.Low)), bound(now.Add(span.High))
	return r
}

// explainRunSample is how many recent run times Explain reads of a limit, at most.
const explainRunSample = 200

// recentRuns reads the run times of key's recent completions (sluice_run_time): the newest first,
// up to explainRunSample of them, over the last hour (UsageHistory).
func (q *Queue) recentRuns(ctx context.Context, tx pgx.Tx, key string, now time.Time) (admit.RunTimes, error) {
	rows, err := tx.Query(ctx, q.s(`SELECT run_ms FROM {s}.sluice_run_time WHERE key = $1 AND ended_at > $2 AND ended_at <= $3
		ORDER BY ended_at DESC LIMIT $4`), key, now.Add(-UsageHistory), now, explainRunSample)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ds []time.Duration
	for rows.Next() && len(ds) < explainRunSample {
		var ms []int32
		if err := rows.Scan(&ms); err != nil {
			return nil, err
		}
		for _, m := range ms[:min(len(ms), explainRunSample-len(ds))] {
			ds = append(ds, time.Duration(m)*time.Millisecond)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return admit.NewRunTimes(ds), nil
}

// paceAmong is how many admissions recentPace looks back for: the trailing window of the limit's
// usage history that holds that many (or the whole hour), so that the share of a reservation used
// neither jumps when one admission leaves a fixed window nor rests on one or two.
const paceAmong = 20

// pace is what a limit admitted over a trailing window: requests, the tokens they drew net of the
// refunds of reported usage, and those refunds, since From.
type pace struct {
	From                       time.Time
	Requests, Tokens, Returned int64
	// Output and ReturnedOutput are the output tokens drawn net of refunds, and their refunds.
	Output, ReturnedOutput int64
}

// recentPace reads key's usage history back from now until it holds paceAmong admissions, at most an
// hour of it.
func (q *Queue) recentPace(ctx context.Context, tx pgx.Tx, key string, now time.Time) (pace, error) {
	rows, err := tx.Query(ctx, q.s(`SELECT second, requests, tokens, returned_input + returned_output, output_tokens, returned_output FROM {s}.sluice_usage
		WHERE key = $1 AND second > $2 AND second <= $3 ORDER BY second DESC`), key, now.Add(-time.Hour), now)
	if err != nil {
		return pace{}, err
	}
	defer rows.Close()
	p := pace{From: now}
	for rows.Next() && p.Requests < paceAmong {
		var (
			at                                         time.Time
			requests, tokens, returned, output, retOut int64
		)
		if err := rows.Scan(&at, &requests, &tokens, &returned, &output, &retOut); err != nil {
			return pace{}, err
		}
		p.From, p.Requests, p.Tokens, p.Returned = at, p.Requests+requests, p.Tokens+tokens, p.Returned+returned
		p.Output, p.ReturnedOutput = p.Output+output, p.ReturnedOutput+retOut
	}
	return p, rows.Err()
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

// usedShareOutput is the share of their output reservations the runs used, over the pace's window:
// the output tokens drawn net of refunds over those and the refunds. Zero, not known, when no output
// was reserved: a reservation given as one figure reserves none, and the output its usage reports is
// debt that the share in all (usedShare) reads.
func (p pace) usedShareOutput() float64 {
	reserved := p.Output + p.ReturnedOutput
	if reserved <= 0 {
		return 0
	}
	return min(1, max(0, float64(p.Output)/float64(reserved)))
}
