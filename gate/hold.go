package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// completeRPCTimeout bounds one attempt to complete Acquire.
const completeRPCTimeout = 10 * time.Second

// hold is one Acquire: written as a ticket, then, once admitted, a permit this process holds until it
// is released, lapses, or its workflow closes. The plugin's dispatcher runs run as the ticket's run,
// so that the permit holds the ticket's slot exactly as a running activity does, and the run's end
// reconciles its reservation exactly as a run's does.
type hold struct {
	g          *Gate
	token      []byte
	workflowID string
	runID      string
	deadline   time.Time // Temporal's deadline of the Acquire attempt; zero for none
	holdFor    time.Duration
	model      string
	limits     []string

	releases chan releaseCall
	ended    chan struct{} // closed when the hold ends (holds.end)
}

// releaseCall is a Release handed to the hold that holds its permit; the hold answers on done.
type releaseCall struct {
	req  ReleaseRequest
	done chan<- releaseAnswer
}

type releaseAnswer struct {
	res ReleaseResult
	err error
}

// run is the admitted ticket's run. It completes Acquire with the permit, then holds the permit:
// the ticket stays running, its slot taken, until a Release, the hold's lapse, the workflow's close
// or the gate's stop. It returns activity.ErrResultPending: there is nothing more to deliver.
func (h *hold) run(ctx context.Context) (any, error) {
	r, ok := admission.From(ctx)
	if !ok {
		return nil, errors.New("sluice gate: a hold ran outside the dispatcher")
	}
	f := r.Facts()
	now := time.Now()
	permit := Permit{Version: ContractVersion, TicketID: f.TicketID, Holder: h.g.host.Owner, ReleaseTaskQueue: h.g.queue,
		Limits: f.Limits, AdmittedAt: f.AdmittedAt, ExpiresAt: now.Add(h.holdFor), WaitedMS: f.AdmittedAt.Sub(f.EnqueuedAt).Milliseconds()}
	if permit.WaitedMS < 0 {
		permit.WaitedMS = 0
	}
	h.releases = make(chan releaseCall)
	h.g.holds.add(f.TicketID, h)
	reason := h.g.holds.end // what the hold ended with, remembered for a late Release
	if !h.complete(ctx, permit) {
		// Nobody waits for the permit (the workflow cancelled Acquire, or it timed out): the call
		// never happened, so its reservation comes back whole.
		_ = sluiceactivity.ReportTokens(ctx, 0, 0)
		reason(f.TicketID, ReasonUnknown)
		return nil, activity.ErrResultPending
	}
	lapse := time.NewTimer(time.Until(permit.ExpiresAt))
	defer lapse.Stop()
	check := time.NewTicker(h.g.opts.CheckInterval)
	defer check.Stop()
	for {
		select {
		case call := <-h.releases:
			res, err := h.apply(ctx, call.req)
			if err != nil {
				call.done <- releaseAnswer{err: err}
				continue // a bad Release leaves the permit held
			}
			reason(f.TicketID, ReasonReleased)
			call.done <- releaseAnswer{res: res}
			return nil, activity.ErrResultPending
		case <-lapse.C:
			h.g.log.Warn("sluice gate: a permit lapsed unreleased; its reservation is kept as spent",
				"ticket_id", f.TicketID, "workflow_id", h.workflowID, "held", h.holdFor)
			reason(f.TicketID, ReasonLapsed)
			return nil, activity.ErrResultPending
		case <-check.C:
			if h.workflowClosed(ctx) {
				h.g.log.Info("sluice gate: a permit's workflow closed unreleased; its reservation is kept as spent",
					"ticket_id", f.TicketID, "workflow_id", h.workflowID)
				reason(f.TicketID, ReasonWorkflowClosed)
				return nil, activity.ErrResultPending
			}
		case <-h.g.life.Done():
			reason(f.TicketID, ReasonLapsed)
			return nil, activity.ErrResultPending
		case <-ctx.Done():
			// The dispatcher is stopping: its runs are cancelled and their tickets completed.
			reason(f.TicketID, ReasonLapsed)
			return nil, activity.ErrResultPending
		}
	}
}

// complete completes Acquire with permit, retrying until Temporal answers or the attempt's deadline
// passes, and reports whether the workflow has the permit. Temporal's NotFound on the first try means
// the Acquire is gone; after a try whose answer was lost it may mean that try succeeded, so the
// permit is held (a permit held for nothing lapses; one released for a call under way would
// over-admit).
func (h *hold) complete(ctx context.Context, permit Permit) bool {
	lost := false
	backoff := 100 * time.Millisecond
	for {
		rpc, cancel := context.WithTimeout(ctx, completeRPCTimeout)
		err := h.g.client.CompleteActivity(rpc, h.token, permit, nil)
		cancel()
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return true
		case errors.As(err, &notFound):
			return lost
		}
		lost = true
		if !h.deadline.IsZero() && time.Now().After(h.deadline) {
			return false
		}
		h.g.log.Warn("sluice gate: complete Acquire with its permit; retrying", "ticket_id", permit.TicketID, "error", err)
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
		case <-ctx.Done():
			return lost
		}
	}
}

// workflowClosed reports whether Temporal says the permit's workflow run is no longer running (or no
// longer known). An error leaves the permit held until the next check.
func (h *hold) workflowClosed(ctx context.Context) bool {
	rpc, cancel := context.WithTimeout(ctx, completeRPCTimeout)
	defer cancel()
	d, err := h.g.client.DescribeWorkflowExecution(rpc, h.workflowID, h.runID)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return true
	case err != nil:
		return false
	}
	return d.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// apply reconciles a Release in the run: the provider's headers, the usage, a 429's pause.
func (h *hold) apply(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	hdr := req.header()
	observed := false
	if len(hdr) > 0 {
		if err := sluiceactivity.ReportHeaders(ctx, hdr); err != nil {
			h.g.log.Warn("sluice gate: learn from the provider's headers", "ticket_id", req.Permit.TicketID, "error", err)
		} else {
			observed = true
		}
	}
	u, reported := req.usage()
	switch {
	case reported && (req.Model != "" || h.model != ""):
		model := req.Model
		if model == "" {
			model = h.model
		}
		if err := sluiceactivity.ReportModelUsage(ctx, model, u); err != nil {
			return ReleaseResult{}, badField("model", fmt.Sprintf("%q", model), err.Error())
		}
	case reported:
		if err := sluiceactivity.ReportTokens(ctx, u.Input, u.Output); err != nil {
			return ReleaseResult{}, err
		}
	case req.RateLimited && admit.RefusedCost(-1, observed) == 0:
		// A 429 used nothing: the reservation comes back, as the plugin's requeue gives it back;
		// unless the headers set the buckets to what the provider says remains (admit.RefusedCost).
		_ = sluiceactivity.ReportTokens(ctx, 0, 0)
	}
	if req.RateLimited {
		wait := time.Duration(req.RetryAfterMS) * time.Millisecond
		if wait == 0 {
			wait = sluiceactivity.DefaultRetryAfter
			if until, ok := throttle.ParseRetryAfter(hdr, time.Now()); ok {
				wait = time.Until(until)
			}
		}
		wait = min(wait, throttle.MaxRetryAfter)
		if err := h.g.d.Queue().Pause(context.WithoutCancel(ctx), h.limits[0], time.Now().Add(wait)); err != nil {
			return ReleaseResult{}, fmt.Errorf("sluice gate: pause %q after a 429: %w", h.limits[0], err)
		}
	}
	return ReleaseResult{Version: ContractVersion, Released: true}, nil
}
