package dispatcher

import (
	"context"
	"errors"
	"fmt"

	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/store"
)

// Causes of a run context's cancellation.
var (
	errCancelRequested = errors.New("sluice: Temporal requested cancellation")
	errActivityGone    = errors.New("sluice: Temporal no longer knows the activity")
	errStopping        = errors.New("sluice: worker stopped before the activity finished")
)

// encoder turns what an activity returned into the outcome that is stored and delivered, with the
// worker's converters.
type encoder struct {
	data    converter.DataConverter
	failure converter.FailureConverter
}

// outcome encodes a run's result or error; ctx is the run's context, whose cause tells a
// cancellation Temporal asked for from a stop.
func (e encoder) outcome(ctx context.Context, result any, err error) (string, []byte) {
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		payloads, cerr := e.data.ToPayloads(result)
		if cerr != nil {
			return e.failed(fmt.Errorf("sluice: encode activity result: %w", cerr))
		}
		b, merr := proto.Marshal(payloads)
		if merr != nil {
			return e.failed(fmt.Errorf("sluice: marshal activity result: %w", merr))
		}
		return store.OutcomeCompleted, b
	case errors.Is(err, activity.ErrResultPending):
		return store.OutcomePending, nil
	case errors.Is(cause, errStopping):
		return store.OutcomeHandedBack, nil
	case errors.Is(cause, errCancelRequested) && (errors.Is(err, context.Canceled) || temporal.IsCanceledError(err)):
		return store.OutcomeCanceled, nil
	}
	return e.failed(err)
}

func (e encoder) failed(err error) (string, []byte) {
	b, merr := proto.Marshal(e.failure.ErrorToFailure(err))
	if merr != nil {
		b, _ = proto.Marshal(&failurepb.Failure{Message: err.Error()})
	}
	return store.OutcomeFailed, b
}

// handedBackError is what Temporal sees for an attempt whose worker stopped or died before it ran to
// the end: a retryable failure, so that the retry policy runs it again on a live worker.
func handedBackError() error {
	return temporal.NewApplicationError("sluice: the worker holding this activity stopped or died; Temporal will retry it", "SluiceHandedBack")
}
