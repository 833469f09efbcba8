package gate

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// ContractVersion is the version of the gate's contract: the activities' names and their JSON
// payloads. Every payload carries it in "version"; a gate refuses a version it does not serve. A
// change that an older client would misread gets a new version and new activity names, served beside
// the old ones for at least one release.
const ContractVersion = 1

// The activities a gate serves, by name. A workflow in any SDK schedules AcquireActivity on the
// gate's task queue and ReleaseActivity on the permit's ReleaseTaskQueue.
const (
	// AcquireActivity waits in line for room on the limits an AcquireRequest names and returns a
	// Permit once admitted. It completes asynchronously: waiting holds no activity slot.
	AcquireActivity = "sluice.gate.v1.Acquire"
	// ReleaseActivity gives a Permit back with what the call used (a ReleaseRequest) and returns a
	// ReleaseResult.
	ReleaseActivity = "sluice.gate.v1.Release"
)

// The types of the non-retryable application errors a gate fails Acquire or Release with, besides
// sluiceactivity.ErrTypeAllowanceSpent (an allowance refused the call: its detail is a
// throttle.Refusal, exactly as the plugin's).
const (
	// ErrTypeBadRequest: a field of the request is missing or out of range; the message names the
	// field and the value.
	ErrTypeBadRequest = "SluiceBadRequest"
	// ErrTypeUnknownLimit: the request names a limit key or route the gate does not know.
	ErrTypeUnknownLimit = "SluiceUnknownLimit"
	// ErrTypeVersion: the request's version is not one this gate serves.
	ErrTypeVersion = "SluiceContractVersion"
)

// Bounds on what a request may ask for.
const (
	// MaxLimits is the most limit keys one request may name.
	MaxLimits = 16
	// MaxHold is the longest a permit may be held.
	MaxHold = 24 * time.Hour
	// MaxTokens is the largest token estimate or usage a request may give, per figure.
	MaxTokens = pgqueue.MaxCost
)

// AcquireRequest is the input of AcquireActivity.
type AcquireRequest struct {
	// Version is ContractVersion. Required.
	Version int `json:"version"`
	// Route names a route the gate defines (Options.Routes): its limits, model and tenant limit.
	// Give Route or Limits.
	Route string `json:"route,omitempty"`
	// Limits are the keys of the limits the call draws on, at most MaxLimits; the first is its line,
	// where a 429 and the provider's headers apply. Each must exist (sluice limits set, or the
	// gate's Options.Limits). With Route, they are added after the route's.
	Limits []string `json:"limits,omitempty"`
	// Tokens is the estimated tokens of the call as one figure (a combined budget such as OpenAI's
	// TPM). Give Tokens, or InputTokens and OutputTokens, not both.
	Tokens int64 `json:"tokens,omitempty"`
	// InputTokens and OutputTokens are the estimate by dimension, for limits with input and output
	// budgets (Anthropic's ITPM and OTPM).
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// Model prices the estimate and the reported usage in money, by the gate's price table, for the
	// limits' money allowances. Empty means the route's model, or none.
	Model string `json:"model,omitempty"`
	// Priority orders requests within a line, lower first, 1 to 5. Zero means 3, Temporal's default.
	Priority int `json:"priority,omitempty"`
	// Tenant shares a line fairly between tenants (the fairness key); with a route that has a
	// TenantLimit, it also draws on the tenant's own limit. Empty means none.
	Tenant string `json:"tenant,omitempty"`
	// MaxHoldMS is the longest the permit may be held, in milliseconds, at most MaxHold. Past it the
	// gate releases the permit as an abandoned call (its reservation is kept as spent). Zero means
	// the gate's Options.DefaultHold.
	MaxHoldMS int64 `json:"max_hold_ms,omitempty"`
}

// Permit is the result of AcquireActivity: the call may go ahead. Give it back with ReleaseActivity,
// scheduled on ReleaseTaskQueue, whatever the call's outcome.
type Permit struct {
	// Version is ContractVersion.
	Version int `json:"version"`
	// TicketID is the admission ticket the permit holds (sluice explain TICKET_ID).
	TicketID int64 `json:"ticket_id"`
	// Holder is the gate process holding the permit.
	Holder string `json:"holder"`
	// ReleaseTaskQueue is the task queue of the gate process holding the permit: schedule
	// ReleaseActivity there. If that process is gone, the Release is never picked up (set a
	// ScheduleToStart timeout and treat the timeout as released): the permit went with its process.
	ReleaseTaskQueue string `json:"release_task_queue"`
	// Limits are the keys the permit draws on; the first is the line.
	Limits []string `json:"limits"`
	// AdmittedAt is when the request was admitted.
	AdmittedAt time.Time `json:"admitted_at"`
	// ExpiresAt is when the gate releases the permit if it has not been released by then.
	ExpiresAt time.Time `json:"expires_at"`
	// WaitedMS is how long the request waited in line, in milliseconds.
	WaitedMS int64 `json:"waited_ms"`
}

// ReleaseRequest is the input of ReleaseActivity.
type ReleaseRequest struct {
	// Version is ContractVersion. Required.
	Version int `json:"version"`
	// Permit is the permit to release, as AcquireActivity returned it. Its TicketID and Holder are
	// required.
	Permit Permit `json:"permit"`
	// Tokens, or InputTokens and OutputTokens, are what the call used, reconciled against the
	// reservation (unused tokens come back). All absent (null) means not known: the reservation is
	// kept as spent, as the plugin keeps an unreported run's.
	Tokens       *int64 `json:"tokens,omitempty"`
	InputTokens  *int64 `json:"input_tokens,omitempty"`
	OutputTokens *int64 `json:"output_tokens,omitempty"`
	// Model prices the usage when it is not the request's model.
	Model string `json:"model,omitempty"`
	// RateLimited says the provider answered 429: the line's limit is paused on every replica until
	// RetryAfterMS from now, or the reset the Headers give, and the call's reservation comes back.
	RateLimited bool `json:"rate_limited,omitempty"`
	// RetryAfterMS is the provider's Retry-After, in milliseconds, when RateLimited. Zero means the
	// Headers' or, with neither, one second.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Headers are the provider's response headers (names in any case): its rate-limit headers teach
	// the line's limit what the provider enforces (header learning), and Retry-After paces a 429.
	Headers map[string][]string `json:"headers,omitempty"`
}

// ReleaseResult is the result of ReleaseActivity.
type ReleaseResult struct {
	// Version is ContractVersion.
	Version int `json:"version"`
	// Released is true when this request released the permit. False means it was released before:
	// by an earlier Release (a retry), or by the gate because its hold lapsed or its workflow
	// closed; Reason says which.
	Released bool `json:"released"`
	// Reason, when Released is false: "released", "lapsed", "workflow_closed" or "unknown" (this
	// process holds no such permit).
	Reason string `json:"reason,omitempty"`
}

// The reasons of a ReleaseResult that released nothing.
const (
	ReasonReleased       = "released"
	ReasonLapsed         = "lapsed"
	ReasonWorkflowClosed = "workflow_closed"
	ReasonUnknown        = "unknown"
)

// requestError is a request the gate refuses: the field and the value it refuses.
type requestError struct {
	kind string // ErrTypeBadRequest, ErrTypeVersion
	msg  string
}

func (e *requestError) Error() string { return e.msg }

func badField(field string, value any, why string) error {
	return &requestError{kind: ErrTypeBadRequest, msg: fmt.Sprintf("sluice gate: %s %v: %s", field, value, why)}
}

func checkVersion(activity string, v int) error {
	if v == ContractVersion {
		return nil
	}
	return &requestError{kind: ErrTypeVersion, msg: fmt.Sprintf(
		"sluice gate: %s: version %d is not served by this gate, which serves version %d (set \"version\": %d)", activity, v, ContractVersion, ContractVersion)}
}

// validate checks r's fields that need no route, naming the first that is wrong.
func (r AcquireRequest) validate() error {
	if err := checkVersion(AcquireActivity, r.Version); err != nil {
		return err
	}
	if r.Route == "" && len(r.Limits) == 0 {
		return badField("route", `""`, "give a route or limits")
	}
	if len(r.Limits) > MaxLimits {
		return badField("limits", len(r.Limits), fmt.Sprintf("at most %d keys", MaxLimits))
	}
	for i, k := range r.Limits {
		if err := throttle.ValidateKey(k); err != nil {
			return badField(fmt.Sprintf("limits[%d]", i), fmt.Sprintf("%q", k), err.Error())
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"tokens", r.Tokens}, {"input_tokens", r.InputTokens}, {"output_tokens", r.OutputTokens}} {
		if f.v < 0 || f.v > MaxTokens {
			return badField(f.name, f.v, fmt.Sprintf("must be 0 to %d", MaxTokens))
		}
	}
	if r.Tokens != 0 && (r.InputTokens != 0 || r.OutputTokens != 0) {
		return badField("tokens", r.Tokens, "give tokens, or input_tokens and output_tokens, not both")
	}
	if r.Priority < 0 || r.Priority > 5 {
		return badField("priority", r.Priority, "must be 1 to 5 (0 for the default, 3)")
	}
	if r.MaxHoldMS < 0 || r.MaxHoldMS > MaxHold.Milliseconds() {
		return badField("max_hold_ms", r.MaxHoldMS, fmt.Sprintf("must be 1 to %d (%s), or 0 for the gate's default", MaxHold.Milliseconds(), MaxHold))
	}
	if len(r.Tenant) > 200 {
		return badField("tenant", fmt.Sprintf("of %d bytes", len(r.Tenant)), "must be at most 200 bytes")
	}
	return nil
}

// cost is the request's token estimate.
func (r AcquireRequest) cost() throttle.Cost {
	if r.Tokens != 0 {
		return throttle.Tokens(r.Tokens)
	}
	return throttle.Cost{Input: r.InputTokens, Output: r.OutputTokens}
}

// validate checks r, naming the first field that is wrong.
func (r ReleaseRequest) validate() error {
	if err := checkVersion(ReleaseActivity, r.Version); err != nil {
		return err
	}
	if r.Permit.TicketID <= 0 {
		return badField("permit.ticket_id", r.Permit.TicketID, "must be the ticket_id of a permit Acquire returned")
	}
	if r.Permit.Holder == "" {
		return badField("permit.holder", `""`, "must be the holder of a permit Acquire returned")
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"tokens", r.Tokens}, {"input_tokens", r.InputTokens}, {"output_tokens", r.OutputTokens}} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxTokens) {
			return badField(f.name, *f.v, fmt.Sprintf("must be 0 to %d", MaxTokens))
		}
	}
	if r.Tokens != nil && (r.InputTokens != nil || r.OutputTokens != nil) {
		return badField("tokens", *r.Tokens, "give tokens, or input_tokens and output_tokens, not both")
	}
	if r.RetryAfterMS < 0 || r.RetryAfterMS > MaxHold.Milliseconds() {
		return badField("retry_after_ms", r.RetryAfterMS, fmt.Sprintf("must be 0 to %d", MaxHold.Milliseconds()))
	}
	if r.RetryAfterMS != 0 && !r.RateLimited {
		return badField("retry_after_ms", r.RetryAfterMS, "is given only with rate_limited: true")
	}
	return nil
}

// usage is what the request reports the call used, and whether it reports any.
func (r ReleaseRequest) usage() (throttle.Usage, bool) {
	switch {
	case r.Tokens != nil:
		return throttle.Usage{Input: *r.Tokens}, true
	case r.InputTokens != nil || r.OutputTokens != nil:
		var u throttle.Usage
		if r.InputTokens != nil {
			u.Input = *r.InputTokens
		}
		if r.OutputTokens != nil {
			u.Output = *r.OutputTokens
		}
		return u, true
	}
	return throttle.Usage{}, false
}

// header returns r's headers as an http.Header, names canonical.
func (r ReleaseRequest) header() http.Header {
	h := make(http.Header, len(r.Headers))
	for k, vs := range r.Headers {
		for _, v := range vs {
			h.Add(strings.TrimSpace(k), v)
		}
	}
	return h
}
