package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// TicketState is where a ticket is in its life.
type TicketState string

// The states of a ticket.
const (
	// TicketStateQueued waits in its line for admission.
	TicketStateQueued TicketState = "queued"
	// TicketStateAdmitted holds its reservation on every limit and waits for its owner to start it.
	TicketStateAdmitted TicketState = "admitted"
	// TicketStateRunning is being run by its owner; it still holds its reservation.
	TicketStateRunning TicketState = "running"
	// TicketStateFinished has released its limits; its outcome waits to be delivered to Temporal.
	TicketStateFinished TicketState = "finished"
	// TicketStateReturned was handed back to Temporal for a retry and is kept so that the retry takes
	// its place in line.
	TicketStateReturned TicketState = "returned"
)

// Outcome kinds recorded by Complete and HandBack. The outcome bytes are Temporal protos, encoded
// with the worker's data and failure converters (codec included) before they are stored, and
// delivered as they are: nothing is encoded twice, and nothing is stored unencoded.
const (
	OutcomeCompleted = "completed" // commonpb.Payloads of the result
	OutcomeFailed    = "failed"    // failurepb.Failure
	OutcomeCanceled  = "canceled"  // commonpb.Payloads of the details, possibly empty
	OutcomePending   = "pending"   // the activity completes itself asynchronously: nothing to deliver
	// OutcomeHandedBack marks a ticket whose owner died or stopped before running it to the end: it is
	// reported to Temporal as a retryable failure.
	OutcomeHandedBack = "handed_back"
)

// Ticket is one activity invocation's claim on its limits. It is a plain value. Its JSON (what the
// sluice command's tickets --json prints) leaves out what is not for operators' eyes: TaskToken, the
// Outcome's bytes and TraceContext; and the times that are zero when unset.
type Ticket struct {
	ID    int64       `json:"id"`
	State TicketState `json:"state"`
	// LineKey is the limit whose line the ticket waits in: the first of LimitKeys.
	LineKey   string   `json:"line_key"`
	LimitKeys []string `json:"limit_keys"`
	// Cost is the reservation in tokens, in all; ActualCost the usage reported at completion, in all,
	// -1 when none was. OutputCost and ActualOutput are their parts of output tokens; the rest is input.
	Cost         int64     `json:"cost"`
	ActualCost   int64     `json:"actual_cost"`
	OutputCost   int64     `json:"output_cost"`
	ActualOutput int64     `json:"actual_output"`
	Priority     int       `json:"priority"`
	FairnessKey  string    `json:"fairness_key"`
	VStart       float64   `json:"vstart"`
	Seq          int64     `json:"seq"`
	Owner        string    `json:"owner"`
	Namespace    string    `json:"namespace"`
	WorkflowID   string    `json:"workflow_id"`
	RunID        string    `json:"run_id"`
	ActivityID   string    `json:"activity_id"`
	ActivityType string    `json:"activity_type"`
	Attempt      int       `json:"attempt"`
	TaskToken    []byte    `json:"-"`
	Deadline     time.Time `json:"deadline,omitzero"`   // zero when none
	NotBefore    time.Time `json:"not_before,omitzero"` // zero when none
	EnqueuedAt   time.Time `json:"enqueued_at"`
	AdmittedAt   time.Time `json:"admitted_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	OutcomeKind  string    `json:"outcome_kind,omitempty"`
	Outcome      []byte    `json:"-"`
	Deliveries   int       `json:"deliveries"`
	TraceContext string    `json:"-"`
	Requeues     int       `json:"requeues"`
	// WaitReason is why the ticket last waited when a claim looked at it ("concurrency", "rate",
	// "tokens", "inflight_tokens", "paused"), followed by " of " and the limit's key when a limit other
	// than its line's held it ("concurrency of tenant:acme"); empty when it only waited behind others
	// in its line.
	WaitReason string `json:"wait_reason"`
	// CostMoney is the reservation in money, micro-units of the currency of the money allowances of
	// its limits (a price table's estimate); ActualMoney what the reported usage cost, -1 when not
	// known.
	CostMoney   int64 `json:"cost_money,omitzero"`
	ActualMoney int64 `json:"actual_money"`

	// spend is set when an allowance of one of the ticket's limits counted it at its admission, and
	// charged says which, by limit key (nil when an older replica admitted it: see chargedOn).
	spend   bool
	charged map[string][]string
}

const ticketColumns = `id, state, line_key, limit_keys, cost, coalesce(actual_cost, -1), priority, fairness_key, vstart, seq,
	owner, namespace, workflow_id, run_id, activity_id, activity_type, attempt, task_token, deadline,
	nullif(not_before, '-infinity'), enqueued_at, admitted_at, finished_at, coalesce(outcome_kind, ''), outcome,
	deliveries, coalesce(trace_context, ''), requeues, coalesce(wait_reason, ''), output_cost, coalesce(actual_output, 0),
	cost_money, coalesce(actual_money, -1), allowance_spend, allowance_charged`

// candidate is the ticket as a claim sees it.
func (t Ticket) candidate() admit.Candidate {
	return admit.Candidate{ID: t.ID, LimitKeys: t.LimitKeys, Cost: t.Cost, OutputCost: t.OutputCost, Money: t.CostMoney,
		VStart: t.VStart, Deadline: t.Deadline, NotBefore: t.NotBefore}
}

// Reserved is the ticket's reservation by dimension.
func (t Ticket) Reserved() throttle.Cost {
	return admit.CostOf(t.Cost, t.OutputCost)
}

// Waited is how long t waited for admission: from EnqueuedAt to AdmittedAt, or to now while it has
// not been admitted.
func (t Ticket) Waited(now time.Time) time.Duration {
	if t.AdmittedAt.IsZero() {
		return now.Sub(t.EnqueuedAt)
	}
	return t.AdmittedAt.Sub(t.EnqueuedAt)
}

func scanTicket(row pgx.Row) (Ticket, error) {
	var (
		t                                       Ticket
		state                                   string
		deadline, notBefore, admitted, finished *time.Time
	)
	err := row.Scan(&t.ID, &state, &t.LineKey, &t.LimitKeys, &t.Cost, &t.ActualCost, &t.Priority, &t.FairnessKey,
		&t.VStart, &t.Seq, &t.Owner, &t.Namespace, &t.WorkflowID, &t.RunID, &t.ActivityID, &t.ActivityType,
		&t.Attempt, &t.TaskToken, &deadline, &notBefore, &t.EnqueuedAt, &admitted, &finished, &t.OutcomeKind,
		&t.Outcome, &t.Deliveries, &t.TraceContext, &t.Requeues, &t.WaitReason, &t.OutputCost, &t.ActualOutput,
		&t.CostMoney, &t.ActualMoney, &t.spend, &t.charged)
	t.State = TicketState(state)
	t.EnqueuedAt = t.EnqueuedAt.UTC()
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{deadline, &t.Deadline}, {notBefore, &t.NotBefore}, {admitted, &t.AdmittedAt}, {finished, &t.FinishedAt}} {
		if p.src != nil {
			*p.dst = p.src.UTC()
		}
	}
	return t, err
}

func collectTickets(rows pgx.Rows, err error) ([]Ticket, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Ticket
	for rows.Next() {
		t, err := scanTicket(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Ticket returns ticket id in whatever state it is.
func (q *Queue) Ticket(ctx context.Context, id int64) (Ticket, error) {
	t, err := scanTicket(q.pool.QueryRow(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket WHERE id = $1`), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Ticket{}, ErrNotFound
	}
	return t, err
}

// TicketQuery finds the tickets of a Temporal workflow: FindTickets' input.
type TicketQuery struct {
	// WorkflowID is the workflow's ID. Required.
	WorkflowID string
	// ActivityID narrows the search to one activity of the workflow; empty for all.
	ActivityID string
	// Namespace narrows the search to one Temporal namespace; empty for all.
	Namespace string
	// Max is the most tickets returned, newest first; 0 means 100.
	Max int
}

// FindTickets returns the tickets of the workflow (and activity) of tq, in any state, newest first:
// how an operator who sees a slow activity in Temporal's UI finds its ticket. A ticket is kept until
// its outcome is delivered, so a finished activity's ticket is soon gone. It reads every ticket: an
// operator's read, not one for a hot path.
func (q *Queue) FindTickets(ctx context.Context, tq TicketQuery) ([]Ticket, error) {
	switch {
	case tq.WorkflowID == "":
		return nil, errors.New("sluice: find tickets: WorkflowID is required")
	case tq.Max < 0:
		return nil, fmt.Errorf("sluice: find tickets: Max must be >= 0, got %d", tq.Max)
	case tq.Max == 0:
		tq.Max = 100
	}
	rows, err := q.pool.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM {s}.sluice_ticket
		WHERE workflow_id = $1 AND ($2 = '' OR activity_id = $2) AND ($3 = '' OR namespace = $3) ORDER BY id DESC LIMIT $4`),
		tq.WorkflowID, tq.ActivityID, tq.Namespace, tq.Max)
	ts, err := collectTickets(rows, err)
	if err != nil {
		return nil, fmt.Errorf("sluice: find tickets of workflow %q: %w", tq.WorkflowID, err)
	}
	return ts, nil
}
