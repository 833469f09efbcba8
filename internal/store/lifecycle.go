package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
)

// RenewLease records that owner is alive until ttl from now. A process renews its lease well within
// ttl; once it lapses, any other process may hand the owner's tickets back to Temporal. lapsed reports
// that the lease being renewed had expired already: survivors may have handed back the owner's tickets
// meanwhile, and an activity the owner still runs may run again elsewhere. The owner is recorded as
// not listening (see RenewListening).
func (q *Queue) RenewLease(ctx context.Context, owner string, ttl time.Duration) (lapsed bool, err error) {
	return q.RenewListening(ctx, owner, ttl, false)
}

// RenewListening is RenewLease, recording too whether owner listens for its admissions. A claim
// moves a listening owner's tickets straight to running and names them in the owner's notification
// (NotifiedIDs), so that the owner reads them (RunningTickets) instead of taking them; another
// owner's are admitted, for TakeAdmitted.
func (q *Queue) RenewListening(ctx context.Context, owner string, ttl time.Duration, listens bool) (lapsed bool, err error) {
	if owner == "" {
		return false, errors.New("sluice: RenewLease: owner must not be empty")
	}
	if ttl <= 0 {
		return false, fmt.Errorf("sluice: RenewLease: ttl must be > 0, got %s", ttl)
	}
	err = q.pool.QueryRow(ctx, q.s(`WITH now AS (SELECT coalesce($2::timestamptz, clock_timestamp()) AS t),
		prev AS (SELECT lease_expires_at FROM {s}.sluice_owner WHERE id = $1)
		INSERT INTO {s}.sluice_owner (id, lease_expires_at, listens) SELECT $1, t + $3::interval, $4 FROM now
		ON CONFLICT (id) DO UPDATE SET lease_expires_at = excluded.lease_expires_at, listens = excluded.listens
		RETURNING coalesce((SELECT lease_expires_at FROM prev) <= (SELECT t FROM now), false)`), owner, q.nowArg(), ttl, listens).Scan(&lapsed)
	if err != nil {
		return false, fmt.Errorf("sluice: renew lease of %q: %w", owner, err)
	}
	return lapsed, nil
}

// StopListening records that owner no longer listens for its admissions: claims from then on admit
// its tickets for TakeAdmitted. A stopping process calls it first, so that the stop hands back at
// once what was admitted for it and not begun.
func (q *Queue) StopListening(ctx context.Context, owner string) error {
	_, err := q.pool.Exec(ctx, q.s(`UPDATE {s}.sluice_owner SET listens = false WHERE id = $1 AND listens`), owner)
	return err
}

// RunningTickets returns owner's running tickets among ids (all of them when ids is nil), in ID
// order: what a claim moved straight to running for a listening owner, for the owner to run. It only
// reads: the owner runs each once, whichever way it learns of it (Runner's tryBegin).
func (q *Queue) RunningTickets(ctx context.Context, owner string, ids []int64) ([]Ticket, error) {
	ts, err := collectTickets(q.pool.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE owner = $1 AND state = 'running' AND ($2::bigint[] IS NULL OR id = ANY($2)) ORDER BY id`), owner, ids))
	if err != nil {
		return nil, fmt.Errorf("sluice: read running tickets of %q: %w", owner, err)
	}
	return ts, nil
}

// DropLease removes owner's lease, as a process does when it stops after handing its tickets back.
func (q *Queue) DropLease(ctx context.Context, owner string) error {
	_, err := q.pool.Exec(ctx, q.s(`DELETE FROM {s}.sluice_owner WHERE id = $1`), owner)
	return err
}

// TakeAdmitted moves up to max of owner's admitted tickets to running and returns them: the owner runs
// each exactly once, whichever process admitted it.
func (q *Queue) TakeAdmitted(ctx context.Context, owner string, max int) ([]Ticket, error) {
	if max <= 0 {
		max = DefaultClaimMax
	}
	ts, err := q.take(ctx, owner, max, nil)
	if err != nil {
		return nil, fmt.Errorf("sluice: take admitted tickets of %q: %w", owner, err)
	}
	return ts, nil
}

// take moves up to max of owner's admitted tickets (those of ids only, unless nil) to running, in ID
// order, and returns them; tickets other transactions hold locked are left for the next take. It
// runs in an explicit transaction, though the work is one statement: the tickets are read before the
// COMMIT, so that a take whose answer is lost is either rolled back or, past the COMMIT, marked
// ErrCommitUnknown for the owner's self-check, never taken with its caller none the wiser.
func (q *Queue) take(ctx context.Context, owner string, max int, ids []int64) ([]Ticket, error) {
	var ts []Ticket
	err := InTx(ctx, q.pool, func(tx pgx.Tx) (err error) {
		ts, err = collectTickets(tx.Query(ctx, q.s(`UPDATE {s}.sluice_ticket SET state = 'running'
			WHERE id IN (SELECT id FROM {s}.sluice_ticket WHERE owner = $1 AND state = 'admitted'
				AND ($3::bigint[] IS NULL OR id = ANY($3))
				ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) AND state = 'admitted'
			RETURNING `+ticketColumns), owner, max, ids))
		return err
	})
	return ts, err
}

// RequeueParams describes a ticket to put back in line.
type RequeueParams struct {
	// TicketID is the ticket, admitted or running. Required.
	TicketID int64
	// NotBefore keeps the ticket out of admission until then. Zero means at once.
	NotBefore time.Time
	// ActualCost is the usage to reconcile, as in CompleteParams (bounded alike). A provider's 429
	// usually counts the request but no tokens: pass 0 to give the tokens back, or negative to keep
	// them spent.
	ActualCost int64
	// ActualOutput is the part of ActualCost of output tokens, as in CompleteParams.
	ActualOutput int64
	// PauseKeys are paused until PauseUntil, on every replica (a 429's Retry-After).
	PauseKeys  []string
	PauseUntil time.Time
}

// Requeue puts an admitted or running ticket back in line at its old place, releasing its limits,
// without spending a Temporal attempt. It returns ErrNotFound when the ticket is in no such state.
func (q *Queue) Requeue(ctx context.Context, p RequeueParams) error {
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		ts, err := collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
			WHERE id = $1 AND state IN ('admitted', 'running') FOR UPDATE`), p.TicketID))
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return ErrNotFound
		}
		// Lock the paused keys with the ticket's own, in one key-ordered statement, so that this
		// transaction never waits on one key while holding a later one.
		if _, err := q.lockLimits(ctx, tx, append(slices.Clone(ts[0].LimitKeys), p.PauseKeys...), false); err != nil {
			return err
		}
		total, _ := boundUsage(p.ActualCost, 0)
		now, err := q.release(ctx, tx, ts, []runUsage{{total: total, output: p.ActualOutput, money: -1}})
		if err != nil {
			return err
		}
		if len(p.PauseKeys) > 0 && p.PauseUntil.After(now) {
			if _, err := tx.Exec(ctx, q.s(pauseSQL), p.PauseKeys, p.PauseUntil); err != nil {
				return err
			}
		}
		var notBefore any
		if !p.NotBefore.IsZero() {
			notBefore = p.NotBefore
		}
		tag, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket SET state = 'queued', admitted_at = NULL, wait_reason = NULL,
			not_before = coalesce($2::timestamptz, '-infinity'), requeues = requeues + 1
			WHERE id = $1 AND state IN ('admitted', 'running')`), p.TicketID, notBefore)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("ticket %d was no longer admitted or running when put back in line", p.TicketID)
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("sluice: requeue ticket %d: %w", p.TicketID, err)
	}
	return err
}

// Cancel removes a ticket that has not started: a queued ticket is deleted, an admitted one releases
// its reservation in full first (nothing ran). It returns ErrNotFound when the ticket is running or
// gone; a running ticket is cancelled through its context and then completed.
func (q *Queue) Cancel(ctx context.Context, id int64) error {
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		ts, err := collectTickets(tx.Query(ctx, q.s(`DELETE FROM {s}.sluice_ticket
			WHERE id = $1 AND state IN ('queued', 'admitted') RETURNING `+ticketColumns), id))
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return ErrNotFound
		}
		if ts[0].State != TicketStateAdmitted {
			return nil
		}
		_, err = q.release(ctx, tx, ts, []runUsage{{total: admit.AbandonedCost(false), money: -1, void: true}})
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("sluice: cancel ticket %d: %w", id, err)
	}
	return err
}

// HandBackParams bounds one hand-back.
type HandBackParams struct {
	// Owner, when set, hands back that owner's unfinished tickets whatever its lease says: a process
	// stopping gracefully does this for itself. When empty, the tickets of every owner whose lease
	// has expired are handed back.
	Owner string
	// Max is the most tickets handed back by one call. Defaults to DefaultClaimMax.
	Max int
	// SkipRunning leaves running tickets alone: a stopping process hands back its queued work at
	// once and gives its running work time to finish.
	SkipRunning bool
	// TicketIDs, when set with Owner, hands back only those of Owner's tickets: its self-check does
	// this for tickets it no longer holds.
	TicketIDs []int64
}

// HandBack takes the unfinished tickets (queued, admitted or running) of dead owners, or of
// p.Owner, releases the limits those that were admitted hold (giving an admitted ticket's tokens
// back, keeping a running one's as spent: its call may have reached the provider), and marks them finished with OutcomeHandedBack, to be
// reported to Temporal as a retryable failure by whoever delivers outcomes. The retry's ticket takes
// the same place in line. It returns the tickets handed back.
func (q *Queue) HandBack(ctx context.Context, p HandBackParams) ([]Ticket, error) {
	if p.Max <= 0 {
		p.Max = DefaultClaimMax
	}
	var out []Ticket
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		now, err := q.now(ctx, tx)
		if err != nil {
			return err
		}
		ts, err := collectTickets(tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket t
			WHERE state IN ('queued', 'admitted', 'running') AND NOT ($4 AND state = 'running')
				AND ($5::bigint[] IS NULL OR id = ANY($5)) AND (
				($1 <> '' AND owner = $1) OR
				($1 = '' AND NOT EXISTS (SELECT 1 FROM {s}.sluice_owner o WHERE o.id = t.owner AND o.lease_expires_at > $2)))
			ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED`), p.Owner, now, p.Max, p.SkipRunning, p.TicketIDs))
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return nil
		}
		var held []Ticket
		var ids []int64
		for _, t := range ts {
			ids = append(ids, t.ID)
			if t.State == TicketStateAdmitted || t.State == TicketStateRunning {
				held = append(held, t)
			}
		}
		// An admitted ticket never ran: its tokens come back. A running one may have reached the
		// provider: its reservation stands as spent.
		actual := make([]runUsage, len(held))
		for i, t := range held {
			actual[i] = runUsage{total: admit.AbandonedCost(t.State == TicketStateRunning), money: -1, void: t.State != TicketStateRunning}
		}
		if now, err = q.release(ctx, tx, held, actual); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, q.s(`UPDATE {s}.sluice_ticket SET state = 'finished', finished_at = $2, deliver_after = $2,
			outcome_kind = $3, outcome = NULL WHERE id = ANY($1) AND state IN ('queued', 'admitted', 'running')`), ids, now, OutcomeHandedBack)
		if err != nil {
			return err
		}
		if n := tag.RowsAffected(); n != int64(len(ids)) {
			return fmt.Errorf("%d of the tickets %v were no longer unfinished when handed back", int64(len(ids))-n, ids)
		}
		for i := range ts {
			ts[i].State, ts[i].FinishedAt, ts[i].OutcomeKind, ts[i].Outcome = TicketStateFinished, now, OutcomeHandedBack, nil
		}
		out = ts
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sluice: hand back tickets: %w", err)
	}
	return out, nil
}

// Unfinished counts owner's tickets a hand-back with the same SkipRunning would take, locked or not:
// a stopping process asks it when its hand-back comes back empty, because a ticket locked by another
// transaction (a claim under way, or one whose connection was cut and whose backend has not noticed
// yet) is skipped by the hand-back but not finished.
func (q *Queue) Unfinished(ctx context.Context, owner string, skipRunning bool) (int, error) {
	var n int
	err := q.pool.QueryRow(ctx, q.s(`SELECT count(*) FROM {s}.sluice_ticket
		WHERE owner = $1 AND state IN ('queued', 'admitted', 'running') AND NOT ($2 AND state = 'running')`),
		owner, skipRunning).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sluice: count the unfinished tickets of %q: %w", owner, err)
	}
	return n, nil
}

// TakeDeliveries returns up to max finished tickets whose outcome is due for delivery to Temporal, and
// pushes their next delivery back by retry, so that if this process dies before acknowledging them
// another delivers them then. Any process may deliver any outcome: it has the task token.
func (q *Queue) TakeDeliveries(ctx context.Context, max int, retry time.Duration) ([]Ticket, error) {
	if max <= 0 {
		max = DefaultClaimMax
	}
	ts, err := collectTickets(q.pool.Query(ctx, q.s(`UPDATE {s}.sluice_ticket SET deliveries = deliveries + 1,
			deliver_after = coalesce($1::timestamptz, clock_timestamp()) + $3::interval
		WHERE id IN (SELECT id FROM {s}.sluice_ticket WHERE state = 'finished'
			AND deliver_after <= coalesce($1::timestamptz, clock_timestamp())
			ORDER BY deliver_after, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING `+ticketColumns), q.nowArg(), max, retry))
	if err != nil {
		return nil, fmt.Errorf("sluice: take deliveries: %w", err)
	}
	return ts, nil
}

// Delivered acknowledges that Temporal accepted (or no longer knows) ticket id's outcome: the row is
// deleted, or, for a handed-back ticket, kept as returned so that the retry finds its place.
func (q *Queue) Delivered(ctx context.Context, id int64) error {
	_, err := q.pool.Exec(ctx, q.s(`WITH d AS (
			DELETE FROM {s}.sluice_ticket WHERE id = $1 AND state = 'finished' AND outcome_kind IS DISTINCT FROM $2 RETURNING id)
		UPDATE {s}.sluice_ticket SET state = 'returned', outcome = NULL, task_token = NULL
		WHERE id = $1 AND state = 'finished' AND outcome_kind = $2`), id, OutcomeHandedBack)
	if err != nil {
		return fmt.Errorf("sluice: acknowledge ticket %d: %w", id, err)
	}
	return nil
}
