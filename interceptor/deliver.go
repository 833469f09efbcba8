package interceptor

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/engine"
)

// Outcome kinds stored with a finished ticket. The outcome bytes are Temporal protos, encoded with the
// worker's data and failure converters (codec included) before they are stored, and delivered as they
// are: nothing is encoded twice, and nothing is stored unencoded.
const (
	outcomeCompleted = "completed" // commonpb.Payloads of the result
	outcomeFailed    = "failed"    // failurepb.Failure
	outcomeCanceled  = "canceled"  // commonpb.Payloads of the details, possibly empty
	outcomePending   = "pending"   // the activity completes itself asynchronously: nothing to deliver
)

// encodeOutcome turns what the activity returned into what is stored and delivered.
func (rt *runtime) encodeOutcome(ctx context.Context, result any, err error) (string, []byte) {
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		payloads, cerr := rt.opts.DataConverter.ToPayloads(result)
		if cerr != nil {
			return rt.encodeFailure(fmt.Errorf("sluice: encode activity result: %w", cerr))
		}
		b, merr := proto.Marshal(payloads)
		if merr != nil {
			return rt.encodeFailure(fmt.Errorf("sluice: marshal activity result: %w", merr))
		}
		return outcomeCompleted, b
	case errors.Is(err, activity.ErrResultPending):
		return outcomePending, nil
	case errors.Is(cause, errStopping):
		return engine.OutcomeHandedBack, nil
	case errors.Is(cause, errCancelRequested) && (errors.Is(err, context.Canceled) || temporal.IsCanceledError(err)):
		return outcomeCanceled, nil
	}
	return rt.encodeFailure(err)
}

func (rt *runtime) encodeFailure(err error) (string, []byte) {
	b, merr := proto.Marshal(rt.opts.FailureConverter.ErrorToFailure(err))
	if merr != nil {
		b, _ = proto.Marshal(&failurepb.Failure{Message: err.Error()})
	}
	return outcomeFailed, b
}

// handedBackError is what Temporal sees for an attempt whose worker stopped or died before it ran to
// the end: a retryable failure, so that the retry policy runs it again on a live worker.
func handedBackError() error {
	return temporal.NewApplicationError("sluice: the worker holding this activity stopped or died; Temporal will retry it", "SluiceHandedBack")
}

// deliver reports a finished ticket's outcome to Temporal. Temporal answering NotFound (the attempt
// timed out, was cancelled or completed) counts as delivered: there is no one left to tell.
func (rt *runtime) deliver(ctx context.Context, t engine.Ticket) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	svc := rt.opts.Client.WorkflowService()
	var err error
	switch t.OutcomeKind {
	case outcomeCompleted, outcomeCanceled:
		payloads := &commonpb.Payloads{}
		if err := proto.Unmarshal(t.Outcome, payloads); err != nil {
			return fmt.Errorf("sluice: stored outcome of ticket %d: %w", t.ID, err)
		}
		if len(payloads.Payloads) == 0 {
			payloads = nil
		}
		if t.OutcomeKind == outcomeCompleted {
			_, err = svc.RespondActivityTaskCompleted(ctx, &workflowservice.RespondActivityTaskCompletedRequest{
				TaskToken: t.TaskToken, Result: payloads, Identity: rt.opts.Identity, Namespace: t.Namespace})
		} else {
			_, err = svc.RespondActivityTaskCanceled(ctx, &workflowservice.RespondActivityTaskCanceledRequest{
				TaskToken: t.TaskToken, Details: payloads, Identity: rt.opts.Identity, Namespace: t.Namespace})
		}
	case outcomeFailed, engine.OutcomeHandedBack:
		f := &failurepb.Failure{}
		if t.OutcomeKind == outcomeFailed {
			if err := proto.Unmarshal(t.Outcome, f); err != nil {
				return fmt.Errorf("sluice: stored outcome of ticket %d: %w", t.ID, err)
			}
		} else {
			f = rt.opts.FailureConverter.ErrorToFailure(handedBackError())
		}
		_, err = svc.RespondActivityTaskFailed(ctx, &workflowservice.RespondActivityTaskFailedRequest{
			TaskToken: t.TaskToken, Failure: f, Identity: rt.opts.Identity, Namespace: t.Namespace})
	case outcomePending:
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
		rt.opts.Logger.Error("sluice: Temporal rejected an outcome as invalid; dropping it", "ticket_id", t.ID, "error", err)
		return nil
	}
	return err
}

// deliverAndAck delivers and, once Temporal has it, removes the ticket. A failed delivery stays in
// Postgres and is retried by every replica's delivery loop.
func (rt *runtime) deliverAndAck(ctx context.Context, t engine.Ticket) {
	if err := rt.deliver(ctx, t); err != nil {
		rt.opts.Logger.Warn("sluice: deliver outcome; will retry", "ticket_id", t.ID, "error", err)
		return
	}
	if err := rt.q.Delivered(ctx, t.ID); err != nil {
		rt.opts.Logger.Warn("sluice: acknowledge delivered outcome", "ticket_id", t.ID, "error", err)
	}
}
