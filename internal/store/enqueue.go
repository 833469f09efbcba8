package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// MaxCost bounds a ticket's token cost, so that no arithmetic on it overflows.
const MaxCost = int64(1) << 40

// EnqueueParams describes a ticket to write.
type EnqueueParams struct {
	// LimitKeys are the limits the ticket draws on; it is admitted only when every one has room. The
	// first is its line: tickets are admitted in order within the line of their first limit. Required.
	LimitKeys []string
	// Cost is the estimated token cost reserved at admission, in all, from 0 to MaxCost. Defaults to 0.
	Cost int64
	// OutputCost is the part of Cost reserved for output tokens, from 0 to Cost; the rest is input.
	// Defaults to 0: a cost given as one figure is input.
	OutputCost int64
	// CostMoney is the reservation in money, in micro-units of the currency of the money allowances of
	// the limits (a price table's estimate of Cost: throttle.PriceTable.Estimate), from 0 to
	// throttle.MaxAllowanceAmount. Defaults to 0.
	CostMoney int64
	// Priority orders tickets within a line: lower first, in the range of int32. Defaults to 0.
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
	if p.OutputCost < 0 || p.OutputCost > p.Cost {
		return fmt.Errorf("sluice: EnqueueParams.OutputCost must be in [0, Cost %d], got %d", p.Cost, p.OutputCost)
	}
	if p.CostMoney < 0 || p.CostMoney > throttle.MaxAllowanceAmount {
		return fmt.Errorf("sluice: EnqueueParams.CostMoney must be in [0, %d], got %d", throttle.MaxAllowanceAmount, p.CostMoney)
	}
	if p.Weight == 0 {
		p.Weight = 1
	}
	if err := admit.ValidateWeight(p.Weight); err != nil {
		return fmt.Errorf("sluice: EnqueueParams.Weight: %w", err)
	}
	if p.Owner == "" {
		return errors.New("sluice: EnqueueParams.Owner must not be empty")
	}
	if p.Priority < math.MinInt32 || p.Priority > math.MaxInt32 {
		return fmt.Errorf("sluice: EnqueueParams.Priority must be in [%d, %d], got %d", math.MinInt32, math.MaxInt32, p.Priority)
	}
	if p.Attempt > math.MaxInt32 {
		return fmt.Errorf("sluice: EnqueueParams.Attempt must be at most %d, got %d", math.MaxInt32, p.Attempt)
	}
	if p.Attempt == 0 {
		p.Attempt = 1
	}
	if p.Attempt < 0 {
		return fmt.Errorf("sluice: EnqueueParams.Attempt must be >= 1, got %d", p.Attempt)
	}
	return nil
}

// MaxEnqueueBatch bounds the tickets one EnqueueMany writes, so that its arrays stay well inside one
// statement's limits.
const MaxEnqueueBatch = 10000

// Enqueue writes a ticket and wakes the claimers. A retry of an activity attempt whose earlier ticket
// was handed back (same namespace, workflow, run and activity ID, a lower attempt) takes that
// ticket's place in line rather than going to the back. It returns the ticket as written.
func (q *Queue) Enqueue(ctx context.Context, p EnqueueParams) (Ticket, error) {
	return q.enqueueOne(ctx, q.pool, p)
}

// EnqueueTx is Enqueue inside tx: the ticket exists when, and only when, tx commits.
func (q *Queue) EnqueueTx(ctx context.Context, tx pgx.Tx, p EnqueueParams) (Ticket, error) {
	return q.enqueueOne(ctx, tx, p)
}

func (q *Queue) enqueueOne(ctx context.Context, db DB, p EnqueueParams) (Ticket, error) {
	ts, err := q.enqueueMany(ctx, db, []EnqueueParams{p})
	if err != nil {
		return Ticket{}, unwrapOne(err)
	}
	return ts[0], nil
}

// EnqueueMany writes every ticket of ps, or none: Enqueue for many at once, in one transaction and
// one statement, in the order given (within a line, tickets of equal priority and fair-share tag are
// admitted in that order). An invalid ticket, or one naming a limit that does not exist, fails the
// whole call with an error naming its index. It returns the tickets as written, in the order of ps.
func (q *Queue) EnqueueMany(ctx context.Context, ps []EnqueueParams) ([]Ticket, error) {
	return q.enqueueMany(ctx, q.pool, ps)
}

// EnqueueManyTx is EnqueueMany inside tx: the tickets exist when, and only when, tx commits.
func (q *Queue) EnqueueManyTx(ctx context.Context, tx pgx.Tx, ps []EnqueueParams) ([]Ticket, error) {
	return q.enqueueMany(ctx, tx, ps)
}

// EnqueueEach writes the tickets of ps that are valid and name only limits that exist, in one
// transaction and one statement, and reports each of the others' reasons: the write of a group commit,
// where one caller's bad ticket must not fail the others'. errs[i] is nil when ts[i] was written; err
// is the whole statement's failure, when nothing was written.
func (q *Queue) EnqueueEach(ctx context.Context, ps []EnqueueParams) (ts []Ticket, errs []error, err error) {
	if err := checkBatch("EnqueueEach", ps); err != nil {
		return nil, nil, err
	}
	ts, errs, valid, at := validateEach(ps)
	if len(valid) == 0 {
		return ts, errs, nil
	}
	err = InTx(ctx, q.pool, func(tx pgx.Tx) error {
		written, err := q.enqueueRows(ctx, tx, valid, true)
		placeWritten(ts, errs, valid, at, written)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sluice: enqueue: %w", err)
	}
	return ts, errs, nil
}

// checkBatch refuses a batch of more than MaxEnqueueBatch tickets, naming the call.
func checkBatch(call string, ps []EnqueueParams) error {
	if len(ps) > MaxEnqueueBatch {
		return fmt.Errorf("sluice: %s takes at most %d tickets, got %d", call, MaxEnqueueBatch, len(ps))
	}
	return nil
}

// validateEach validates each ticket of ps, filling in its defaults: errs[i] is why ps[i] is
// invalid; valid are the others, at their indexes at in ps. ts has room for every ticket.
func validateEach(ps []EnqueueParams) (ts []Ticket, errs []error, valid []EnqueueParams, at []int) {
	errs = make([]error, len(ps))
	valid = make([]EnqueueParams, 0, len(ps))
	at = make([]int, 0, len(ps))
	for i := range ps {
		p := ps[i]
		if errs[i] = p.validate(); errs[i] == nil {
			valid = append(valid, p)
			at = append(at, i)
		}
	}
	return make([]Ticket, len(ps)), errs, valid, at
}

// placeWritten puts the tickets written of valid (by their index in valid) at their indexes at in
// ts, and an unknown limit's error in errs for each valid ticket not written.
func placeWritten(ts []Ticket, errs []error, valid []EnqueueParams, at []int, written map[int]Ticket) {
	for j, i := range at {
		if t, ok := written[j]; ok {
			ts[i] = t
		} else {
			errs[i] = unknownLimit(valid[j])
		}
	}
}

func (q *Queue) enqueueMany(ctx context.Context, db DB, ps []EnqueueParams) ([]Ticket, error) {
	if err := checkBatch("EnqueueMany", ps); err != nil {
		return nil, err
	}
	ps = slices.Clone(ps) // validate fills in defaults
	for i := range ps {
		if err := ps[i].validate(); err != nil {
			return nil, &indexError{i: i, n: len(ps), err: err}
		}
	}
	if len(ps) == 0 {
		return nil, nil
	}
	ts := make([]Ticket, len(ps))
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		written, err := q.enqueueRows(ctx, tx, ps, true)
		if err != nil {
			return err
		}
		for i := range ps {
			t, ok := written[i]
			if !ok {
				return &indexError{i: i, n: len(ps), err: unknownLimit(ps[i])}
			}
			ts[i] = t
		}
		return nil
	})
	var ie *indexError
	if err != nil && !errors.As(err, &ie) {
		return nil, fmt.Errorf("sluice: enqueue: %w", err)
	}
	return ts, err
}

func unknownLimit(p EnqueueParams) error {
	return fmt.Errorf("%w: EnqueueParams.LimitKeys %q names a limit that was never upserted", ErrUnknownLimit, p.LimitKeys)
}

// indexError is the failure of one ticket of a batch: it names the ticket's index when the batch has
// more than one.
type indexError struct {
	i, n int
	err  error
}

func (e *indexError) Error() string {
	if e.n == 1 {
		return e.err.Error()
	}
	return fmt.Sprintf("ticket %d of %d: %v", e.i, e.n, e.err)
}

func (e *indexError) Unwrap() error { return e.err }

// unwrapOne returns the error of a batch of one as Enqueue has always returned it.
func unwrapOne(err error) error {
	var ie *indexError
	if errors.As(err, &ie) {
		return ie.err
	}
	return err
}
