package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/store"
)

// deliveryRPCTimeout bounds one report to Temporal.
const deliveryRPCTimeout = 10 * time.Second

// Deliverer reports outcomes to Temporal. A run that just finished is delivered at once, before its
// outcome is recorded (Deliver); its loop retries, every PollInterval, the recorded outcomes whose
// delivery failed on any replica (a Temporal outage) and the hand-backs' failures, acknowledging each
// once Temporal has it (DeliverAndAck).
type Deliverer struct {
	loops
	*deps
}

// Start starts the retry loop.
func (d *Deliverer) Start(ctx context.Context) error { return d.start(ctx, d.loop) }

// Stop ends the retry loop.
func (d *Deliverer) Stop(ctx context.Context) error { return d.stop(ctx) }

func (d *Deliverer) loop(ctx context.Context) {
	d.takeLoop(ctx, nil, "take deliveries",
		func(ctx context.Context, n int) ([]store.Ticket, error) {
			return d.q.TakeDeliveries(ctx, n, 10*time.Second)
		},
		d.DeliverAndAck)
}

// DeliverAndAck delivers a recorded outcome and, once Temporal has it, removes the ticket. A failed
// delivery stays in Postgres and is retried by every replica's delivery loop.
func (d *Deliverer) DeliverAndAck(ctx context.Context, t store.Ticket) {
	if err := d.Deliver(ctx, t); err != nil {
		return
	}
	if err := d.q.Delivered(ctx, t.ID); err != nil {
		d.log.Warn("sluice: acknowledge delivered outcome", "ticket_id", t.ID, "error", err)
	}
}

// Deliver reports t's outcome to Temporal and says whether Temporal has it (or no longer knows the
// attempt), logging a failure: the runner calls it before recording a finished run, so that an
// outcome Temporal has is completed with no row kept for delivery (store.CompleteParams.Delivered),
// and one it does not have is recorded for the delivery loop to retry.
func (d *Deliverer) Deliver(ctx context.Context, t store.Ticket) error {
	err := d.deliver(ctx, t)
	if err != nil && ctx.Err() == nil {
		d.log.Warn("sluice: deliver outcome; will retry", "ticket_id", t.ID, "error", err)
	}
	return err
}

// deliver reports a finished ticket's outcome to Temporal. Temporal answering NotFound (the attempt
// timed out, was cancelled or completed) counts as delivered: there is no one left to tell.
func (d *Deliverer) deliver(ctx context.Context, t store.Ticket) error {
	ctx, cancel := context.WithTimeout(ctx, deliveryRPCTimeout)
	defer cancel()
	var err error
	switch t.OutcomeKind {
	case store.OutcomeCompleted, store.OutcomeCanceled:
		err = d.respondPayloads(ctx, t)
	case store.OutcomeFailed, store.OutcomeHandedBack, store.OutcomeRefused:
		err = d.respondFailed(ctx, t)
	case store.OutcomePending:
		return nil
	default:
		return fmt.Errorf("sluice: ticket %d has unknown outcome kind %q", t.ID, t.OutcomeKind)
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil
	}
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) {
		// A malformed task token or outcome will never be accepted: retrying forever would only
		// keep the row. Say so loudly and let it go.
		d.log.Error("sluice: Temporal rejected an outcome as invalid; dropping it", "ticket_id", t.ID, "error", err)
		return nil
	}
	return err
}

func (d *Deliverer) respondPayloads(ctx context.Context, t store.Ticket) error {
	payloads := &commonpb.Payloads{}
	if err := proto.Unmarshal(t.Outcome, payloads); err != nil {
		return fmt.Errorf("sluice: stored outcome of ticket %d: %w", t.ID, err)
	}
	if len(payloads.Payloads) == 0 {
		payloads = nil
	}
	svc := d.cfg.Client.WorkflowService()
	var err error
	if t.OutcomeKind == store.OutcomeCompleted {
		_, err = svc.RespondActivityTaskCompleted(ctx, &workflowservice.RespondActivityTaskCompletedRequest{
			TaskToken: t.TaskToken, Result: payloads, Identity: d.cfg.Identity, Namespace: t.Namespace})
	} else {
		_, err = svc.RespondActivityTaskCanceled(ctx, &workflowservice.RespondActivityTaskCanceledRequest{
			TaskToken: t.TaskToken, Details: payloads, Identity: d.cfg.Identity, Namespace: t.Namespace})
	}
	return err
}

func (d *Deliverer) respondFailed(ctx context.Context, t store.Ticket) error {
	f := &failurepb.Failure{}
	switch t.OutcomeKind {
	case store.OutcomeFailed:
		if err := proto.Unmarshal(t.Outcome, f); err != nil {
			return fmt.Errorf("sluice: stored outcome of ticket %d: %w", t.ID, err)
		}
	case store.OutcomeRefused:
		r, err := store.TicketRefusal(t)
		if err != nil {
			return err
		}
		f = d.cfg.FailureConverter.ErrorToFailure(admission.NewAllowanceSpentError(r))
	default:
		f = d.cfg.FailureConverter.ErrorToFailure(handedBackError())
	}
	_, err := d.cfg.Client.WorkflowService().RespondActivityTaskFailed(ctx, &workflowservice.RespondActivityTaskFailedRequest{
		TaskToken: t.TaskToken, Failure: f, Identity: d.cfg.Identity, Namespace: t.Namespace})
	return err
}
