package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// A cap holds across gate permits and plugin-run activities on one limit: at most two calls are ever
// in flight at the provider, whichever way they were admitted; every permit is released with its
// usage, which the limit's usage then counts in place of the estimate.
func TestGate_CapHoldsAcrossGateAndPlugin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 2, TokensPerMinute: 1e6})
	e.startGate(t, gate.Options{})
	e.startApp(t, "svc")
	e.prov.release = make(chan struct{})

	const gateCalls, routed = 6, 4
	var runs []client.WorkflowRun
	for range gateCalls {
		runs = append(runs, e.start(t, GateCall, callInput{GateQueue: e.gateQueue, Call: true,
			Acquire: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 1000},
			Release: &gate.ReleaseRequest{Version: gate.ContractVersion, Tokens: int64p(100)}}))
	}
	routedRun := e.start(t, RoutedCalls, routed)
	// Two calls reach the provider and wait there: the cap is full.
	require.Eventually(t, func() bool { return e.prov.inFlight.Load() == 2 }, 2*time.Minute, 10*time.Millisecond)
	close(e.prov.release)

	for _, run := range runs {
		var out callOutput
		require.NoError(t, run.Get(context.Background(), &out))
		require.Positive(t, out.Permit.TicketID)
		require.Equal(t, []string{"svc"}, out.Permit.Limits)
		require.Equal(t, e.gate.ReleaseTaskQueue(), out.Permit.ReleaseTaskQueue)
		require.False(t, out.Permit.ExpiresAt.Before(out.Permit.AdmittedAt))
		require.Equal(t, gate.ReleaseResult{Version: gate.ContractVersion, Released: true}, out.Result)
		require.EqualValues(t, 42, out.Called)
		e.waitEnded(t, out.Permit.TicketID)
	}
	// One more call, of no tokens, has a claim fold the releases into the limit's usage.
	require.NoError(t, e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}},
		Release: &gate.ReleaseRequest{Version: gate.ContractVersion, Tokens: int64p(0)}}).Get(context.Background(), nil))
	var sum int64
	require.NoError(t, routedRun.Get(context.Background(), &sum))
	require.EqualValues(t, 7*routed, sum)
	require.LessOrEqual(t, e.prov.peak.Load(), int64(2), "the cap of 2 held across the gate and the plugin")
	require.EqualValues(t, gateCalls+routed, e.prov.calls.Load())
	// Each permit's reservation of 1,000 was reconciled to the 100 reported.
	e.tokensCharged(t, "svc", gateCalls*100)
	problems, err := e.q.Verify(context.Background())
	require.NoError(t, err)
	require.Empty(t, problems)
}

// Acquire refuses bad requests at once, naming the field and the value, with the contract's error
// types; an allowance that refuses refuses Acquire with the plugin's own error and detail.
func TestGate_Refusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t,
		throttle.Limit{Key: "svc", MaxConcurrent: 5},
		throttle.Limit{Key: "plan", MaxConcurrent: 5,
			Allowances: throttle.Allowances{{Meter: throttle.MeterRequests, Amount: 1, Calendar: throttle.CalendarDay, OnSpent: throttle.OnSpentRefuse}}})
	e.startGate(t, gate.Options{Routes: map[string]gate.Route{"openai": {Limits: []string{"svc"}}}})
	e.startApp(t, "svc")

	for _, tc := range []struct {
		name     string
		req      gate.AcquireRequest
		errType  string
		contains string
	}{
		{"Version", gate.AcquireRequest{Version: 2, Limits: []string{"svc"}}, gate.ErrTypeVersion, "version 2 is not served"},
		{"NoLimits", gate.AcquireRequest{Version: 1}, gate.ErrTypeBadRequest, "give a route or limits"},
		{"Priority", gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Priority: 9}, gate.ErrTypeBadRequest, "priority 9: must be 1 to 5"},
		{"NegativeTokens", gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Tokens: -5}, gate.ErrTypeBadRequest, "tokens -5"},
		{"BothCosts", gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Tokens: 5, InputTokens: 5}, gate.ErrTypeBadRequest, "not both"},
		{"Hold", gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, MaxHoldMS: 1e12}, gate.ErrTypeBadRequest, "max_hold_ms 1000000000000"},
		{"UnknownLimit", gate.AcquireRequest{Version: 1, Limits: []string{"nosuch"}}, gate.ErrTypeUnknownLimit, "nosuch"},
		{"UnknownRoute", gate.AcquireRequest{Version: 1, Route: "anthropic"}, gate.ErrTypeUnknownLimit, `route "anthropic" is not one this gate defines (it defines ["openai"])`},
		{"NoModelPrices", gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Model: "gpt-4o"}, gate.ErrTypeBadRequest, "no price table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := e.start(t, GateCall, callInput{GateQueue: e.gateQueue, Acquire: tc.req})
			err := run.Get(context.Background(), nil)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			require.Equal(t, tc.errType, appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Error(), tc.contains)
		})
	}

	// The allowance of one request a day: the first is admitted, the second refused with the detail.
	first := e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Route: "openai", Limits: []string{"plan"}},
		Release: &gate.ReleaseRequest{Version: 1, Tokens: int64p(0)}})
	var out callOutput
	require.NoError(t, first.Get(context.Background(), &out))
	require.Equal(t, []string{"svc", "plan"}, out.Permit.Limits, "the route's limits, then the request's")
	second := e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"plan"}}})
	err := second.Get(context.Background(), nil)
	spent, ok := sluiceactivity.AsAllowanceSpent(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "plan", spent.Limit)
	require.EqualValues(t, 1, spent.Used)
}

// A route's model prices the estimate and the usage for a money allowance, which the Release
// reconciles: what the call cost, not what was reserved, counts toward the allowance.
func TestGate_MoneyReconciles(t *testing.T) {
	t.Parallel()
	// One micro-dollar an input token, two an output token; an allowance of 1,000 a day.
	e := newEnv(t, throttle.Limit{Key: "paid", MaxConcurrent: 5, Allowances: throttle.Allowances{{Meter: throttle.MeterMoney,
		Currency: "USD", Amount: 1000, Calendar: throttle.CalendarDay, OnSpent: throttle.OnSpentRefuse}}})
	e.prices = &throttle.PriceTable{Currency: "USD", Models: map[string]throttle.Price{"m": {Input: 1_000_000, Output: 2_000_000}}}
	e.startGate(t, gate.Options{Routes: map[string]gate.Route{"paid": {Limits: []string{"paid"}, Model: "m"}}})
	e.startApp(t, "paid")

	call := func(used int64) error {
		return e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
			Acquire: gate.AcquireRequest{Version: 1, Route: "paid", Tokens: 600},
			Release: &gate.ReleaseRequest{Version: 1, InputTokens: int64p(used / 3), OutputTokens: int64p(used / 3)}}).Get(context.Background(), nil)
	}
	require.NoError(t, call(300)) // reserved 600, cost 100 + 2 x 100 = 300
	require.NoError(t, call(600)) // 300 + 600 reserved fits 1,000 only if the first came back to 300; cost 600
	err := call(0)                // 900 + 600 does not fit
	spent, ok := sluiceactivity.AsAllowanceSpent(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, throttle.MeterMoney, spent.Allowance.Meter)
	require.EqualValues(t, 900, spent.Used)
}

// A permit whose holder never releases it lapses after its hold, charged as an abandoned run (its
// reservation kept); a Release after that releases nothing and says why.
func TestGate_PermitLapses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 1, TokensPerMinute: 1e6})
	e.startGate(t, gate.Options{})
	e.startApp(t, "svc")

	run := e.start(t, GateCall, callInput{GateQueue: e.gateQueue, Hang: true,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Tokens: 500, MaxHoldMS: 300},
		Release: &gate.ReleaseRequest{Version: 1, Tokens: int64p(1)}})
	held := e.heldTicket(t, run)
	e.waitEnded(t, held.ID)
	// The slot is free: a call through the plugin on the cap of 1 runs (and its claim folds the
	// lapsed permit's release into the usage).
	var sum int64
	require.NoError(t, e.start(t, RoutedCalls, 1).Get(context.Background(), &sum))
	e.tokensCharged(t, "svc", 500)
	require.NoError(t, e.c.SignalWorkflow(context.Background(), run.GetID(), run.GetRunID(), "go", nil))
	var out callOutput
	require.NoError(t, run.Get(context.Background(), &out))
	require.Equal(t, gate.ReleaseResult{Version: gate.ContractVersion, Reason: gate.ReasonLapsed}, out.Result)
}

// A permit whose workflow is terminated comes back once the gate sees the workflow closed.
func TestGate_TerminatedWorkflowReleases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 1})
	e.startGate(t, gate.Options{CheckInterval: 50 * time.Millisecond})
	e.startApp(t, "svc")

	run := e.start(t, GateCall, callInput{GateQueue: e.gateQueue, Hang: true,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}}})
	held := e.heldTicket(t, run)
	require.NoError(t, e.c.TerminateWorkflow(context.Background(), run.GetID(), run.GetRunID(), "test"))
	e.waitEnded(t, held.ID)
	var sum int64
	require.NoError(t, e.start(t, RoutedCalls, 1).Get(context.Background(), &sum))
	require.EqualValues(t, 7, sum)
}

// A Release that reports a 429 pauses the line's limit on every replica, from the Retry-After the
// provider gave, and gives the reservation back.
func TestGate_RateLimitedReleasePauses(t *testing.T) {
	t.Parallel()
	// 10 tokens a second, a burst of 1,000: a reservation of 700 kept would take 70 s to refill.
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 3, TokensPerMinute: 600, TokenBurst: 1000},
		throttle.Limit{Key: "hdr", MaxConcurrent: 3})
	e.startGate(t, gate.Options{})
	e.startApp(t, "svc")

	before := time.Now()
	run := e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}, Tokens: 700},
		Release: &gate.ReleaseRequest{Version: 1, RateLimited: true, RetryAfterMS: 120000}})
	var out callOutput
	require.NoError(t, run.Get(context.Background(), &out))
	require.True(t, out.Result.Released)
	e.waitEnded(t, out.Permit.TicketID)
	// A call behind the pause: the claim that finds it paused folds the release into the limit row.
	waiting := e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}}})
	t.Cleanup(func() {
		_ = e.c.TerminateWorkflow(context.Background(), waiting.GetID(), waiting.GetRunID(), "test over")
	})
	var st store.KeyStatus
	require.Eventually(t, func() bool {
		all, err := e.q.Status(context.Background(), "svc")
		if err != nil || len(all) != 1 {
			return false
		}
		st = all[0]
		return st.HeadWaitReason == "paused"
	}, 2*time.Minute, 20*time.Millisecond, "no claim saw the call behind the pause")
	require.True(t, st.State.PausedUntil.After(before.Add(100*time.Second)), "paused until %v", st.State.PausedUntil)
	require.Zero(t, st.State.InflightCount)
	require.Zero(t, st.State.InflightTokens)
	level := st.State.Tokens.Refill(st.Now, 10, 1000).Level
	require.InDelta(t, 1000, level, 1e-6, "the 700 reserved came back (a kept reservation refills in 70 s, read after %s)", time.Since(before))

	// The provider's Retry-After header paces the pause when the Release gives no retry_after_ms.
	before = time.Now()
	require.NoError(t, e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"hdr"}},
		Release: &gate.ReleaseRequest{Version: 1, RateLimited: true, Headers: map[string][]string{"Retry-After": {"300"}}}}).Get(context.Background(), nil))
	hdr := e.status(t, "hdr")
	require.True(t, hdr.State.PausedUntil.After(before.Add(250*time.Second)), "paused until %v", hdr.State.PausedUntil)
}

// Release is idempotent: a second Release of a released permit releases nothing and says so; a
// Release naming another holder, or a ticket never held, says unknown; a bad Release is refused.
func TestGate_ReleaseAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 3})
	g := e.startGate(t, gate.Options{})
	e.startApp(t, "svc")

	var out callOutput
	require.NoError(t, e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}},
		Release: &gate.ReleaseRequest{Version: 1}}).Get(context.Background(), &out))
	require.True(t, out.Result.Released)

	for _, tc := range []struct {
		name string
		req  gate.ReleaseRequest
		want gate.ReleaseResult
		err  string
	}{
		{"Again", gate.ReleaseRequest{Version: 1, Permit: out.Permit}, gate.ReleaseResult{Version: 1, Reason: gate.ReasonReleased}, ""},
		{"OtherHolder", gate.ReleaseRequest{Version: 1, Permit: gate.Permit{TicketID: out.Permit.TicketID, Holder: "elsewhere"}}, gate.ReleaseResult{Version: 1, Reason: gate.ReasonUnknown}, ""},
		{"NeverHeld", gate.ReleaseRequest{Version: 1, Permit: gate.Permit{TicketID: 1 << 40, Holder: out.Permit.Holder}}, gate.ReleaseResult{Version: 1, Reason: gate.ReasonUnknown}, ""},
		{"NoTicket", gate.ReleaseRequest{Version: 1, Permit: gate.Permit{Holder: out.Permit.Holder}}, gate.ReleaseResult{}, "permit.ticket_id 0"},
		{"NegativeUsage", gate.ReleaseRequest{Version: 1, Permit: out.Permit, InputTokens: int64p(-1)}, gate.ReleaseResult{}, "input_tokens -1"},
		{"RetryAfterWithout429", gate.ReleaseRequest{Version: 1, Permit: out.Permit, RetryAfterMS: 5}, gate.ReleaseResult{}, "only with rate_limited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := runRelease(t, e, g.ReleaseTaskQueue(), tc.req)
			if tc.err != "" {
				var appErr *temporal.ApplicationError
				require.ErrorAs(t, err, &appErr)
				require.Equal(t, gate.ErrTypeBadRequest, appErr.Type())
				require.Contains(t, appErr.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, res)
		})
	}
}

// runRelease runs ReleaseActivity with req on queue through a workflow, as a caller does.
func runRelease(t *testing.T, e *env, queue string, req gate.ReleaseRequest) (gate.ReleaseResult, error) {
	t.Helper()
	run := e.start(t, ReleaseOnly, releaseInput{Queue: queue, Req: req})
	var res gate.ReleaseResult
	err := run.Get(context.Background(), &res)
	var wfErr *temporal.WorkflowExecutionError
	if errors.As(err, &wfErr) {
		err = errors.Unwrap(wfErr)
	}
	return res, err
}

// The provider's rate-limit headers, given with a Release, teach the line's limit what the provider
// enforces, as the plugin's header learning does.
func TestGate_ReleaseTeachesHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, throttle.Limit{Key: "svc", MaxConcurrent: 5, RequestsPerSecond: 10, Burst: 10})
	e.startGate(t, gate.Options{})
	e.startApp(t, "svc")

	require.NoError(t, e.start(t, GateCall, callInput{GateQueue: e.gateQueue,
		Acquire: gate.AcquireRequest{Version: 1, Limits: []string{"svc"}},
		Release: &gate.ReleaseRequest{Version: 1, Tokens: int64p(0), Headers: map[string][]string{
			"x-ratelimit-limit-requests":     {"60"},
			"x-ratelimit-remaining-requests": {"59"},
			"x-ratelimit-reset-requests":     {"1s"},
		}}}).Get(context.Background(), nil))
	st := e.status(t, "svc")
	require.InDelta(t, 1, st.Effective.RequestsPerSecond, 1e-9, "60 a minute, learned from the headers: %+v", st.Effective)
	require.InDelta(t, 10, st.Configured.RequestsPerSecond, 1e-9, "the configured figure stays")
}
