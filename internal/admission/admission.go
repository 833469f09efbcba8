// Package admission is the link between the activity package, which activity code calls, and the
// interceptor, which holds the invocation: a context value that neither side has to import the other
// for.
package admission

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Facts are what Sluice knows of an admitted run.
type Facts struct {
	TicketID   int64
	Limits     []string
	Reserved   throttle.Cost
	EnqueuedAt time.Time
	AdmittedAt time.Time
	Requeues   int
}

// Run is the interceptor's side of one admitted run.
type Run interface {
	Facts() Facts
	ReportUsage(used throttle.Cost)
	// ReportModelUsage reports usage as a price table reads it, for model (empty: the route's),
	// pricing it; it fails when no price table prices the model.
	ReportModelUsage(model string, u throttle.Usage) error
	RateLimited(until time.Time)
	ObserveHeaders(ctx context.Context, h http.Header) error
}

// ErrRefused is what the error RateLimited returns is (errors.Is): the dispatcher requeues a run that
// returns it, without importing the activity package.
var ErrRefused = errors.New("sluice: the provider refused the call")

type key struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r Run) context.Context { return context.WithValue(ctx, key{}, r) }

// From returns the run ctx carries, if any.
func From(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(key{}).(Run)
	return r, ok
}
