// Package activity is what activity code may call to tell Sluice what the provider said: the real
// cost of a call, a 429 with its Retry-After, the provider's rate-limit headers. It also reads the
// facts of the admission. Import it as sluiceactivity, since Temporal has a package of the same name:
//
//	import sluiceactivity "github.com/sluicehq/sluice/activity"
//
//	func Summarize(ctx context.Context, doc string) (string, error) {
//		resp, err := callProvider(ctx, doc)
//		if resp != nil {
//			_ = sluiceactivity.ReportHeaders(ctx, resp.Header) // the key adapts to what the provider says
//		}
//		if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
//			// Back in line without spending a Temporal attempt; the key pauses on every replica.
//			return "", sluiceactivity.RateLimited(ctx, resp.Header)
//		}
//		...
//		_ = sluiceactivity.ReportTokens(ctx, usage.PromptTokens, usage.CompletionTokens)
//		return summary, nil
//	}
//
// # Outside Sluice
//
// Called from an activity that Sluice does not throttle (an unrouted type, a local activity, a
// unit test), the Report functions do nothing and return ErrNotThrottled, which callers may ignore;
// but their arguments are checked first, in or outside Sluice, so that a unit test catches a negative
// count: such a call returns an error naming the argument and its value, never ErrNotThrottled; Admission reports false; RateLimited still returns a *ThrottledError, which
// then fails the attempt as an ordinary retryable error, so that Temporal's retry policy applies.
package activity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/throttle"
)

// ErrNotThrottled is returned by the Report functions when the calling activity is not run by Sluice.
var ErrNotThrottled = errors.New("sluiceactivity: the activity is not throttled by Sluice")

// ThrottledError is what RateLimited returns and the activity returns in turn: the provider refused
// the call until RetryAfter.
type ThrottledError struct {
	// Key is the limit that was paused (the route's first limit); empty outside Sluice.
	Key        string
	RetryAfter time.Time
}

// Is reports whether target is the marker by which the plugin recognises a refused call, however
// the activity wrapped the error it returns.
func (e *ThrottledError) Is(target error) bool { return target == admission.ErrRefused }

// Error says which limit the provider refused and until when.
func (e *ThrottledError) Error() string {
	return fmt.Sprintf("sluice: the provider is rate limiting %q until %s", e.Key, e.RetryAfter.Format(time.RFC3339Nano))
}

// DefaultRetryAfter is the pause when a 429 carries no usable Retry-After header.
const DefaultRetryAfter = time.Second

// ReportUsage reports the real token cost of the call as one figure, to be reconciled with the
// reservation when the activity finishes: a call that used less frees the difference, one that used
// more carries debt. Without a report the reservation stands as spent. The last report (of any Report
// function but ReportHeaders) wins. One figure counts as input tokens (throttle.Tokens): for a limit
// with an output budget, report with ReportTokens or ReportAnthropicUsage.
func ReportUsage(ctx context.Context, tokens int64) error {
	if tokens < 0 {
		return fmt.Errorf("sluiceactivity: ReportUsage: tokens must be >= 0, got %d", tokens)
	}
	return report(ctx, throttle.Tokens(tokens))
}

// ReportTokens reports the real usage as input and output tokens, as the provider counts them toward
// its limits: each is reconciled with its part of the reservation, and their sum with a combined
// budget. For OpenAI, pass usage.prompt_tokens and usage.completion_tokens: cached prompt tokens are
// among the prompt tokens, and OpenAI counts them toward TPM.
func ReportTokens(ctx context.Context, input, output int64) error {
	if input < 0 || output < 0 {
		return fmt.Errorf("sluiceactivity: ReportTokens: tokens must be >= 0, got input %d, output %d", input, output)
	}
	return report(ctx, throttle.Cost{Input: input, Output: output})
}

// AnthropicUsage is the usage of an Anthropic Messages API response, field for field (the SDK's
// anthropic.Usage): InputTokens are the input tokens neither read from nor written to the prompt
// cache.
type AnthropicUsage struct {
	InputTokens              int64
	OutputTokens             int64
	CacheCreationInputTokens int64
	CacheReadInputTokens     int64
	// CacheReadsCount is set for the models whose cache reads count toward the input tokens per
	// minute limit (Anthropic's rate-limit documentation marks them); for the others they do not.
	CacheReadsCount bool
}

// Counted is u as Anthropic counts it toward its limits: input tokens (ITPM) are InputTokens plus
// CacheCreationInputTokens, plus CacheReadInputTokens only when CacheReadsCount; output tokens (OTPM)
// are OutputTokens.
func (u AnthropicUsage) Counted() throttle.Cost {
	in := u.InputTokens + u.CacheCreationInputTokens
	if u.CacheReadsCount {
		in += u.CacheReadInputTokens
	}
	return throttle.Cost{Input: in, Output: u.OutputTokens}
}

// ReportAnthropicUsage reports an Anthropic response's usage, counted as Anthropic counts it toward
// its input and output limits (AnthropicUsage.Counted).
func ReportAnthropicUsage(ctx context.Context, u AnthropicUsage) error {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheCreationInputTokens < 0 || u.CacheReadInputTokens < 0 {
		return fmt.Errorf("sluiceactivity: ReportAnthropicUsage: token counts must be >= 0, got %+v", u)
	}
	return report(ctx, u.Counted())
}

// ReportModelUsage reports the real usage of a call to model as a price table reads it: all input
// tokens (u.Input, cached ones among them), the part of them read from the prompt cache
// (u.CachedInput), and output tokens. The tokens are reconciled as ReportTokens reconciles them, and
// the plugin's price table (sluiceinterceptor.Options.Prices) turns them into the money that the
// limits' money allowances count. An empty model means the route's (Route.Model). It fails, and
// reports nothing, when no price table prices the model; outside Sluice it returns ErrNotThrottled
// after checking its arguments. For Anthropic, u.Input is input_tokens plus
// cache_creation_input_tokens plus cache_read_input_tokens, u.CachedInput the last.
func ReportModelUsage(ctx context.Context, model string, u throttle.Usage) error {
	switch {
	case u.Input < 0 || u.CachedInput < 0 || u.Output < 0:
		return fmt.Errorf("sluiceactivity: ReportModelUsage: token counts must be >= 0, got %+v", u)
	case u.CachedInput > u.Input:
		return fmt.Errorf("sluiceactivity: ReportModelUsage: CachedInput (%d) is part of Input and must not exceed it (%d)", u.CachedInput, u.Input)
	case u.Input > maxReported || u.Output > maxReported-u.Input:
		return fmt.Errorf("sluiceactivity: reported usage must be at most %d tokens, got input %d, output %d", maxReported, u.Input, u.Output)
	}
	r, ok := admission.From(ctx)
	if !ok {
		return ErrNotThrottled
	}
	if err := r.ReportModelUsage(model, u); err != nil {
		return fmt.Errorf("sluiceactivity: ReportModelUsage: %w", err)
	}
	return nil
}

// report hands a validated usage to the run, or returns ErrNotThrottled outside Sluice.
func report(ctx context.Context, used throttle.Cost) error {
	if used.Total() > maxReported || used.Total() < 0 { // the sum overflowed
		return fmt.Errorf("sluiceactivity: reported usage must be at most %d tokens, got input %d, output %d", maxReported, used.Input, used.Output)
	}
	r, ok := admission.From(ctx)
	if !ok {
		return ErrNotThrottled
	}
	r.ReportUsage(used)
	return nil
}

// maxReported bounds a reported usage, as a reservation is bounded (2^40 tokens), so that no
// arithmetic on it overflows.
const maxReported = int64(1) << 40

// ReportHeaders hands Sluice the provider's response headers (OpenAI x-ratelimit-*, Anthropic
// anthropic-ratelimit-*, Retry-After): the route's first limit learns the provider's real rates
// (never above what you configured), admits no more than the provider says remains, and pauses for a
// Retry-After, on every replica.
func ReportHeaders(ctx context.Context, h http.Header) error {
	r, ok := admission.From(ctx)
	if !ok {
		return ErrNotThrottled
	}
	return r.ObserveHeaders(ctx, h)
}

// RateLimited returns the error an activity returns when the provider answered 429: the run goes back
// in line, without spending a Temporal attempt, and its limit pauses until the Retry-After of h (nil
// or no header: DefaultRetryAfter) on every replica. Report the headers too for the key to adapt.
func RateLimited(ctx context.Context, h http.Header) error {
	return RateLimitedFor(ctx, retryAfter(h))
}

// RateLimitedFor is RateLimited with the wait given directly.
func RateLimitedFor(ctx context.Context, wait time.Duration) error {
	wait = min(max(wait, 0), throttle.MaxRetryAfter)
	until := time.Now().Add(wait)
	r, ok := admission.From(ctx)
	if !ok {
		return &ThrottledError{RetryAfter: until}
	}
	r.RateLimited(until)
	f := r.Facts()
	return &ThrottledError{Key: f.Limits[0], RetryAfter: until}
}

func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return DefaultRetryAfter
	}
	now := time.Now()
	if t, ok := throttle.ParseRetryAfter(h, now); ok {
		return t.Sub(now)
	}
	return DefaultRetryAfter
}

// Info is what Sluice knows of the admission of the current run.
type Info struct {
	// TicketID identifies the ticket in Sluice's tables.
	TicketID int64
	// Limits are the keys the run draws on; the first is its line.
	Limits []string
	// ReservedCost is the token estimate reserved at admission, in all; Reserved is it by dimension.
	ReservedCost int64
	Reserved     throttle.Cost
	// Waited is how long the ticket waited in line, from written to admitted.
	Waited time.Duration
	// AdmittedAt is when the ticket was admitted, by the database's clock (read after the claim
	// locked the limits, so that admissions on one limit are in the order they were decided).
	AdmittedAt time.Time
	// Requeues counts the times the run went back in line after a 429.
	Requeues int
}

// Admission returns the facts of the current run's admission, and false outside Sluice.
func Admission(ctx context.Context) (Info, bool) {
	r, ok := admission.From(ctx)
	if !ok {
		return Info{}, false
	}
	f := r.Facts()
	return Info{TicketID: f.TicketID, Limits: f.Limits, ReservedCost: f.Reserved.Total(), Reserved: f.Reserved,
		Waited: f.AdmittedAt.Sub(f.EnqueuedAt), AdmittedAt: f.AdmittedAt, Requeues: f.Requeues}, true
}
