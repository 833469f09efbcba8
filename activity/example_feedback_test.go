package activity_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sluiceactivity "github.com/sluicehq/sluice/activity"
)

// Outside an activity that Sluice throttles (here, a plain context), the Report functions do nothing
// and return ErrNotThrottled, which activity code may ignore.
func ExampleReportTokens() {
	ctx := context.Background()

	err := sluiceactivity.ReportTokens(ctx, 1200, 350) // prompt and completion tokens
	fmt.Println(errors.Is(err, sluiceactivity.ErrNotThrottled))

	// A negative count is a mistake, whether throttled or not.
	fmt.Println(sluiceactivity.ReportTokens(ctx, -1, 350))

	// Output:
	// true
	// sluiceactivity: ReportTokens: tokens must be >= 0, got input -1, output 350
}

// An Anthropic response's usage, counted as Anthropic counts it toward its input and output limits:
// cache reads do not count toward input tokens per minute.
func ExampleReportAnthropicUsage() {
	u := sluiceactivity.AnthropicUsage{ // from message.Usage
		InputTokens: 1_200, CacheCreationInputTokens: 300, CacheReadInputTokens: 4_000, OutputTokens: 450}
	fmt.Printf("%+v\n", u.Counted())

	err := sluiceactivity.ReportAnthropicUsage(context.Background(), u)
	fmt.Println(errors.Is(err, sluiceactivity.ErrNotThrottled))

	// Output:
	// {Input:1500 Output:450}
	// true
}

func ExampleReportUsage() {
	err := sluiceactivity.ReportUsage(context.Background(), 1550) // total tokens
	fmt.Println(err)

	// Output:
	// sluiceactivity: the activity is not throttled by Sluice
}

func ExampleReportHeaders() {
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "60000")
	h.Set("x-ratelimit-remaining-tokens", "1200")

	err := sluiceactivity.ReportHeaders(context.Background(), h)
	fmt.Println(errors.Is(err, sluiceactivity.ErrNotThrottled))

	// Output:
	// true
}

// Outside Sluice, RateLimited still returns a *ThrottledError (with no Key), which fails the attempt
// as an ordinary retryable error so that Temporal's retry policy applies.
func ExampleRateLimited() {
	h := http.Header{}
	h.Set("Retry-After", "2")

	before := time.Now()
	err := sluiceactivity.RateLimited(context.Background(), h)
	var te *sluiceactivity.ThrottledError
	if errors.As(err, &te) {
		// RetryAfter is an instant: the provider's Retry-After from when the response was read.
		fmt.Printf("key %q, retry at least 2s later: %v\n", te.Key, !te.RetryAfter.Before(before.Add(2*time.Second)))
	}

	// Output:
	// key "", retry at least 2s later: true
}

func ExampleRateLimitedFor() {
	before := time.Now()
	err := sluiceactivity.RateLimitedFor(context.Background(), 5*time.Second)
	var te *sluiceactivity.ThrottledError
	if errors.As(err, &te) {
		fmt.Printf("retry at least 5s later: %v\n", !te.RetryAfter.Before(before.Add(5*time.Second)))
	}

	// Output:
	// retry at least 5s later: true
}

func ExampleAdmission() {
	info, ok := sluiceactivity.Admission(context.Background())
	fmt.Println(ok, info.TicketID, info.Limits)

	// Output:
	// false 0 []
}
