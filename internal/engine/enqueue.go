package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// MaxCost bounds a ticket's token cost, so that no arithmetic on it overflows.
const MaxCost = int64(1) << 40

// EnqueueParams describes a ticket to write.
type EnqueueParams struct {
	// LimitKeys are the limits the ticket draws on; it is admitted only when every one has room. The
	// first is its line: tickets are admitted in order within the line of their first limit. Required.
	LimitKeys []string
	// Cost is the estimated token cost reserved at admission, from 0 to MaxCost. Defaults to 0.
	Cost int64
	// Priority orders tickets within a line: lower first. Defaults to 0.
	Priority int
	// FairnessKey shares the line fairly between keys (tenants, workflows) of equal priority. Empty
	// means no fair share: the ticket is ordered by arrival. Defaults to "".
	FairnessKey string
	// Weight is FairnessKey's share relative to other keys. Defaults to 1.
	Weight float64
	// Owner is the process that holds the invocation and runs it once admitted. Required.
	Owner string
	// The Temporal identity of the activity attempt.
	Namespace, WorkflowID, RunID, ActivityID, ActivityType string
	// Attempt is the Temporal attempt number. Defaults to 1.
	Attempt int
	// TaskToken completes the attempt asynchronously; any replica may use it.
	TaskToken []byte
	// Deadline is when Temporal times the attempt out; a ticket is never admitted past it. Zero means none.
	Deadline time.Time
	// NotBefore keeps the ticket from admission until then. Zero means at once.
	NotBefore time.Time
	// TraceContext is the W3C trace context of the activity, for the wait and run spans.
	TraceContext string
}

func (p *EnqueueParams) validate() error {
	if len(p.LimitKeys) == 0 {
		return errors.New("sluice: EnqueueParams.LimitKeys must name at least one limit")
	}
	for i, k := range p.LimitKeys {
		if err := throttle.ValidateKey(k); err != nil {
			return fmt.Errorf("sluice: EnqueueParams.LimitKeys[%d]: %w", i, err)
		}
		if slices.Contains(p.LimitKeys[:i], k) {
			return fmt.Errorf("sluice: EnqueueParams.LimitKeys names %q twice", k)
		}
	}
	if p.Cost < 0 || p.Cost > MaxCost {
		return fmt.Errorf("sluice: EnqueueParams.Cost must be in [0, %d], got %d", MaxCost, p.Cost)
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	if err := throttle.ValidateWeight(p.Weight); err != nil {
		return fmt.Errorf("sluice: EnqueueParams.Weight: %w", err)
	}
	if p.Owner == "" {
		return errors.New("sluice: EnqueueParams.Owner must not be empty")
	}
	if p.Attempt == 0 {
		p.Attempt = 1
	}
	if p.Attempt < 0 {
		return fmt.Errorf("sluice: EnqueueParams.Attempt must be >= 1, got %d", p.Attempt)
	}
	return nil
}

// Enqueue writes a ticket and wakes the claimers. A retry of an activity attempt whose earlier ticket
// was handed back (same namespace, workflow, run and activity ID, a lower attempt) takes that
// ticket's place in line rather than going to the back. It returns the ticket as written.
func (q *Queue) Enqueue(ctx context.Context, p EnqueueParams) (Ticket, error) {
	return q.enqueue(ctx, q.pool, p)
}

// EnqueueTx is Enqueue inside tx: the ticket exists when, and only when, tx commits.
func (q *Queue) EnqueueTx(ctx context.Context, tx pgx.Tx, p EnqueueParams) (Ticket, error) {
	return q.enqueue(ctx, tx, p)
}

func (q *Queue) enqueue(ctx context.Context, db DB, p EnqueueParams) (Ticket, error) {
	if err := p.validate(); err != nil {
		return Ticket{}, err
	}
	var t Ticket
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, q.s(`SELECT count(*) FROM {s}.sluice_limit WHERE key = ANY($1)`), p.LimitKeys).Scan(&n); err != nil {
			return err
		}
		if n != len(p.LimitKeys) {
			return fmt.Errorf("%w: EnqueueParams.LimitKeys %q names a limit that was never upserted", ErrUnknownLimit, p.LimitKeys)
		}
		line := p.LimitKeys[0]
		place, inherited, err := q.inheritPlace(ctx, tx, p)
		if err != nil {
			return err
		}
		if !inherited {
			place, err = q.newPlace(ctx, tx, line, p)
			if err != nil {
				return err
			}
		}
		var deadline, notBefore any
		if !p.Deadline.IsZero() {
			deadline = p.Deadline
		}
		if !p.NotBefore.IsZero() {
			notBefore = p.NotBefore
		}
		t, err = scanTicket(tx.QueryRow(ctx, q.s(`INSERT INTO {s}.sluice_ticket
			(state, line_key, limit_keys, cost, priority, fairness_key, vstart, seq, owner, namespace, workflow_id, run_id,
			 activity_id, activity_type, attempt, task_token, deadline, not_before, enqueued_at, trace_context)
			VALUES ('queued', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
				coalesce($17::timestamptz, '-infinity'), coalesce($18::timestamptz, clock_timestamp()), nullif($19, ''))
			RETURNING `+ticketColumns),
			line, p.LimitKeys, p.Cost, place.Priority, p.FairnessKey, place.Start, place.Seq, p.Owner, p.Namespace,
			p.WorkflowID, p.RunID, p.ActivityID, p.ActivityType, p.Attempt, p.TaskToken, deadline, notBefore,
			q.nowArg(), p.TraceContext))
		if err != nil {
			return err
		}
		return q.notify(ctx, tx, kindWork, line)
	})
	if err != nil {
		if errors.Is(err, ErrUnknownLimit) {
			return Ticket{}, err
		}
		return Ticket{}, fmt.Errorf("sluice: enqueue: %w", err)
	}
	return t, nil
}

// inheritPlace finds the place of an earlier attempt of the same activity that was handed back (or
// whose queued ticket went stale when Temporal timed it out), and removes that ticket.
func (q *Queue) inheritPlace(ctx context.Context, tx pgx.Tx, p EnqueueParams) (throttle.Place, bool, error) {
	if p.ActivityID == "" || p.Attempt <= 1 {
		return throttle.Place{}, false, nil
	}
	var place throttle.Place
	err := tx.QueryRow(ctx, q.s(`WITH prev AS (
			DELETE FROM {s}.sluice_ticket
			WHERE namespace = $1 AND workflow_id = $2 AND run_id = $3 AND activity_id = $4 AND attempt < $5
				AND line_key = $6 AND state IN ('returned', 'queued')
			RETURNING priority, vstart, seq)
		SELECT priority, vstart, seq FROM prev ORDER BY priority, vstart, seq LIMIT 1`),
		p.Namespace, p.WorkflowID, p.RunID, p.ActivityID, p.Attempt, p.LimitKeys[0]).Scan(&place.Priority, &place.Start, &place.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return throttle.Place{}, false, nil
	}
	return place, err == nil, err
}

// newPlace tags a new ticket for fair share and arrival order.
func (q *Queue) newPlace(ctx context.Context, tx pgx.Tx, line string, p EnqueueParams) (throttle.Place, error) {
	place := throttle.Place{Priority: p.Priority}
	if p.FairnessKey == "" {
		// No fair share: start at the line's virtual time, so that the ticket neither jumps ahead of
		// fair-shared work nor falls behind it; ties go by arrival. Reading, not writing, keeps
		// unfair enqueues from contending on one row.
		err := tx.QueryRow(ctx, q.s(`SELECT vtime, nextval('{s}.sluice_ticket_seq') FROM {s}.sluice_limit WHERE key = $1`), line).
			Scan(&place.Start, &place.Seq)
		return place, err
	}
	inc := throttle.FairIncrement(p.Cost, p.Weight)
	if math.IsInf(inc, 0) || math.IsNaN(inc) {
		return place, fmt.Errorf("sluice: fair-share increment of cost %d weight %v is not finite", p.Cost, p.Weight)
	}
	var finish float64
	err := tx.QueryRow(ctx, q.s(`INSERT INTO {s}.sluice_fair AS f (line_key, fairness_key, finish)
		SELECT $1, $2, l.vtime + $3 FROM {s}.sluice_limit l WHERE l.key = $1
		ON CONFLICT (line_key, fairness_key) DO UPDATE
			SET finish = greatest(f.finish, (SELECT vtime FROM {s}.sluice_limit WHERE key = $1)) + $3, updated_at = now()
		RETURNING finish, nextval('{s}.sluice_ticket_seq')`), line, p.FairnessKey, inc).Scan(&finish, &place.Seq)
	place.Start = finish - inc
	return place, err
}
