package admit_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// running is a state with n tickets holding the limit, reserving tokens in all.
func running(n int, tokens int64) throttle.State {
	return throttle.State{InflightCount: n, InflightTokens: tokens}
}

func TestExplain_TenantCapBehindProviderWithRoom(t *testing.T) {
	in := admit.ExplainInput{
		Ticket: admit.Candidate{ID: 7, LimitKeys: []string{"openai", "tenant:acme"}, Cost: 40_000},
		Limits: map[string]admit.LimitState{
			"openai":      {Limit: throttle.Limit{Key: "openai", MaxConcurrent: 20}, State: running(13, 0)},
			"tenant:acme": {Limit: throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1}, State: running(1, 0)},
		},
		Standing: map[string]admit.Standing{
			"tenant:acme": {Releases: []admit.Release{{At: t0.Add(30 * time.Second)}}, RunTime: exactly(20 * time.Second)},
		},
		Now: t0,
	}
	e := admit.Explain(in)
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, "tenant:acme", e.Key)
	require.Equal(t, 1, e.Place)
	require.True(t, e.Limits[0].Room, "openai has room")
	require.False(t, e.Limits[1].Room)
	require.Equal(t, t0.Add(30*time.Second), e.Estimate)
	require.Empty(t, e.Unknown)
}

func TestExplain_OutputTokens(t *testing.T) {
	l := throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000}
	s := throttle.State{OutputTokens: throttle.Bucket{Level: 1_000, At: t0}}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"anthropic"}, Cost: 5_000, OutputCost: 4_000},
		Limits: map[string]admit.LimitState{"anthropic": {Limit: l, State: s}},
		Now:    t0,
	})
	require.Equal(t, "output_tokens", e.WaitsFor)
	require.Equal(t, throttle.Cost{Input: 1_000, Output: 4_000}, e.Cost)
	// 3,000 more output tokens at 100/s.
	require.Equal(t, t0.Add(30*time.Second), e.Estimate)
	require.Equal(t, e.Estimate, e.Limits[0].RetryAt)
}

func TestExplain_Paused(t *testing.T) {
	l := throttle.Limit{Key: "openai", RequestsPerSecond: 10}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"openai"}},
		Limits: map[string]admit.LimitState{"openai": {Limit: l, State: throttle.State{}.Pause(t0.Add(2 * time.Minute))}},
		Now:    t0,
	})
	require.Equal(t, "paused", e.WaitsFor)
	require.Equal(t, t0.Add(2*time.Minute), e.Estimate)
}

func TestExplain_BehindTicketsAhead(t *testing.T) {
	l := throttle.Limit{Key: "email", RequestsPerSecond: 1, Burst: 1}
	empty := throttle.State{Requests: throttle.Bucket{Level: 1, At: t0}}
	in := admit.ExplainInput{
		Ticket:   admit.Candidate{ID: 9, LimitKeys: []string{"email"}},
		Limits:   map[string]admit.LimitState{"email": {Limit: l, State: empty}},
		Standing: map[string]admit.Standing{"email": {Ahead: []throttle.Cost{{}, {}, {}}, AheadCount: 3}},
		Now:      t0,
	}
	e := admit.Explain(in)
	require.Equal(t, throttle.WaitAhead, e.WaitsFor, "the limit has room for it, but three go first")
	require.Equal(t, 4, e.Place)
	// Three ahead take now, +1s, +2s; this one +3s.
	require.Equal(t, t0.Add(3*time.Second), e.Estimate)

	// Those read stand for those not read: 1,000 ahead, 3 read.
	in.Standing["email"] = admit.Standing{Ahead: []throttle.Cost{{}, {}, {}}, AheadCount: 1_000}
	require.Equal(t, t0.Add(1_000*time.Second), admit.Explain(in).Estimate)
}

func TestExplain_TicketsAheadReleaseSlots(t *testing.T) {
	l := throttle.Limit{Key: "k", MaxConcurrent: 2}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"k"}},
		Limits: map[string]admit.LimitState{"k": {Limit: l, State: running(2, 0)}},
		Standing: map[string]admit.Standing{"k": {
			Ahead: []throttle.Cost{{}, {}}, AheadCount: 2, RunTime: exactly(10 * time.Second),
			Releases: []admit.Release{{At: t0.Add(time.Second)}, {At: t0.Add(4 * time.Second)}},
		}},
		Now: t0,
	})
	// The two ahead take the slots freed at +1s and +4s; they free them at +11s and +14s.
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, t0.Add(11*time.Second), e.Estimate)
}

func TestExplain_Unknown(t *testing.T) {
	l := throttle.Limit{Key: "k", MaxConcurrent: 1}
	in := admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"k", "gone"}},
		Limits: map[string]admit.LimitState{"k": {Limit: l, State: running(1, 0)}},
		Now:    t0,
	}
	e := admit.Explain(in)
	require.Equal(t, throttle.WaitUnknownLimit, e.WaitsFor)
	require.Equal(t, "gone", e.Key)
	require.True(t, e.Estimate.IsZero())
	require.Contains(t, e.Unknown, "no run on the limit ended in the last hour")

	delete(in.Limits, "gone")
	in.Ticket.LimitKeys = []string{"k"}
	in.Standing = map[string]admit.Standing{"k": {AheadCount: 200_000}}
	require.Contains(t, admit.Explain(in).Unknown, "more than 100,000")
}

func TestExplain_NotBeforeAndDeadline(t *testing.T) {
	l := throttle.Limit{Key: "k", MaxConcurrent: 5}
	c := admit.Candidate{ID: 1, LimitKeys: []string{"k"}, NotBefore: t0.Add(5 * time.Second), Deadline: t0.Add(3 * time.Second)}
	e := admit.Explain(admit.ExplainInput{Ticket: c, Limits: map[string]admit.LimitState{"k": {Limit: l}}, Now: t0})
	require.Equal(t, throttle.WaitNotBefore, e.WaitsFor)
	require.Equal(t, c.NotBefore, e.Estimate)
	require.True(t, e.Expires, "its deadline falls before it can run")
}

// TestExplain_AgreesWithDecideClaim checks the explanation against the claim on random limits with
// nothing ahead: a ticket explained as admissible now is admitted by DecideClaim; one estimated for
// later is refused just before the estimate and admitted at it, when it waits on buckets alone.
func TestExplain_AgreesWithDecideClaim(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 1))
	var now, later int
	for i := range 5_000 {
		limits := map[string]admit.LimitState{}
		keys := []string{"line", "tenant"}
		for _, k := range keys {
			limits[k] = randomLimitState(rng, k)
		}
		c := admit.Candidate{ID: int64(i), LimitKeys: keys, Cost: rng.Int64N(2_000), OutputCost: 0}
		c.OutputCost = rng.Int64N(c.Cost + 1)
		e := admit.Explain(admit.ExplainInput{Ticket: c, Limits: limits, Now: t0})
		claimAt := func(at time.Time) bool {
			d, err := admit.DecideClaim(admit.ClaimPage{Line: "line", Candidates: []admit.Candidate{c}, Limits: limits, Now: at, Budget: 1})
			require.NoError(t, err)
			return len(d.Admitted) == 1
		}
		for j, w := range e.Limits {
			ls := limits[keys[j]]
			require.Equal(t, ls.Limit.CheckCost(ls.State, t0, admit.CostOf(c.Cost, c.OutputCost)).OK(), w.Room, "case %d %s", i, w.Key)
		}
		if e.WaitsFor == throttle.WaitNothing {
			require.True(t, claimAt(t0), "case %d: explained as admissible now", i)
			require.Equal(t, t0, e.Estimate)
			now++
			continue
		}
		if e.Estimate.IsZero() {
			continue
		}
		require.True(t, claimAt(e.Estimate), "case %d: not admitted at its estimate %v (%+v)", i, e.Estimate.Sub(t0), e)
		require.False(t, claimAt(e.Estimate.Add(-time.Millisecond)), "case %d: admitted before its estimate", i)
		later++
	}
	require.Greater(t, now, 500, "cases admissible now")
	require.Greater(t, later, 500, "cases estimated for later")
}

// randomLimitState is a limit of buckets only (no slot is ever released without a run time) with a
// random part-spent state at t0.
func randomLimitState(rng *rand.Rand, key string) admit.LimitState {
	var l throttle.Limit
	l.Key = key
	if rng.IntN(2) == 0 {
		l.RequestsPerSecond = float64(1 + rng.IntN(20))
	}
	if rng.IntN(2) == 0 {
		l.TokensPerMinute = float64(600 + rng.IntN(6_000))
	}
	if rng.IntN(3) == 0 {
		l.OutputTokensPerMinute = float64(600 + rng.IntN(3_000))
	}
	l = l.WithDefaults()
	s := throttle.State{
		Requests:     throttle.Bucket{Level: rng.Float64() * l.Burst, At: t0},
		Tokens:       throttle.Bucket{Level: rng.Float64()*l.TokenBurst - 500, At: t0},
		OutputTokens: throttle.Bucket{Level: rng.Float64() * l.OutputTokenBurst, At: t0},
	}
	if rng.IntN(10) == 0 {
		s = s.Pause(t0.Add(time.Duration(rng.IntN(60_000)) * time.Millisecond))
	}
	return admit.LimitState{Limit: l, State: s}
}

// A release gives the buckets back the part of its reservation a ticket is expected not to use: a
// line on tokens advances at the pace usage, not reservations, allow.
func TestExplain_UsedShareRefundsOnRelease(t *testing.T) {
	l := throttle.Limit{Key: "openai", TokensPerMinute: 6_000, TokenBurst: 1_000}
	in := admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"openai"}, Cost: 1_000},
		Limits: map[string]admit.LimitState{"openai": {Limit: l, State: throttle.State{Tokens: throttle.Bucket{Level: 0, At: t0}}}},
		Standing: map[string]admit.Standing{"openai": {
			Releases: []admit.Release{{At: t0.Add(time.Second), Cost: throttle.Tokens(1_000)}},
			RunTime:  exactly(time.Second),
		}},
		Now: t0,
	}
	// No refund: 1,000 tokens at 100 a second.
	require.Equal(t, t0.Add(10*time.Second), admit.Explain(in).Estimate)
	// Half used: the release at 1 s gives back 500, with the 100 refilled by then: 400 more, at 5 s.
	st := in.Standing["openai"]
	st.UsedShare = 0.5
	in.Standing["openai"] = st
	require.Equal(t, t0.Add(5*time.Second), admit.Explain(in).Estimate)
}

// Without a run time, a ticket admitted in the play never frees its slot, but the tokens it is
// expected not to use still come back: at its admission.
func TestExplain_UsedShareWithoutRunTime(t *testing.T) {
	l := throttle.Limit{Key: "openai", TokensPerMinute: 6_000, TokenBurst: 1_000}
	in := admit.ExplainInput{
		Ticket:   admit.Candidate{ID: 2, LimitKeys: []string{"openai"}, Cost: 1_000},
		Limits:   map[string]admit.LimitState{"openai": {Limit: l}},
		Standing: map[string]admit.Standing{"openai": {Ahead: []throttle.Cost{throttle.Tokens(1_000)}, AheadCount: 1}},
		Now:      t0,
	}
	// The one ahead takes the full bucket; this one waits for 1,000 at 100 a second.
	require.Equal(t, t0.Add(10*time.Second), admit.Explain(in).Estimate)
	st := in.Standing["openai"]
	st.UsedShare = 0.25
	in.Standing["openai"] = st
	// 750 of the one ahead come back at once: 250 more, at 2.5 s.
	require.Equal(t, t0.Add(2500*time.Millisecond), admit.Explain(in).Estimate)
}

// exactly is a run time that does not vary.
func exactly(d time.Duration) admit.Span { return admit.Span{Low: d, Mid: d, High: d} }

// The likely range holds the estimate, whatever the rounding of the plays: at 5 requests/s the fourth
// ahead goes in at +800 ms in every play, but the short play steps through its releases (at +582 ms)
// and a bucket refilled there rounds its next instant up a microsecond.
func TestExplain_RangeHoldsTheEstimate(t *testing.T) {
	l := throttle.Limit{Key: "k", RequestsPerSecond: 5, Burst: 1}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"k"}},
		Limits: map[string]admit.LimitState{"k": {Limit: l, State: throttle.State{Requests: throttle.Bucket{At: t0}}}},
		Standing: map[string]admit.Standing{"k": {AheadCount: 3, Ahead: make([]throttle.Cost, 3),
			RunTime: admit.Span{Low: 382 * time.Millisecond, Mid: 764 * time.Millisecond, High: 1528 * time.Millisecond}}},
		Now: t0,
	})
	require.Equal(t, t0.Add(800*time.Millisecond), e.Estimate)
	require.False(t, e.EstimateLow.After(e.Estimate), "low %s after the estimate %s", e.EstimateLow, e.Estimate)
	require.False(t, e.Estimate.After(e.EstimateHigh), "high %s before the estimate %s", e.EstimateHigh, e.Estimate)
	w := e.Limits[0]
	require.False(t, w.ReadyLow.After(w.ReadyAt))
	require.False(t, w.ReadyAt.After(w.ReadyHigh))
}

// A release gives back the output its runs are expected not to use at the output's own share: the
// runs reserve 500 input and 1,000 output tokens and use all their input but 60% of their output
// (1,100 of 1,500 in all: 73%). Each release gives 400 output tokens back, not 27% of 1,000.
func TestExplain_UsedShareOutput(t *testing.T) {
	l := throttle.Limit{Key: "anthropic", OutputTokensPerMinute: 6_000}
	c := throttle.Cost{Input: 500, Output: 1_000}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 2, LimitKeys: []string{"anthropic"}, Cost: 1_500, OutputCost: 1_000},
		Limits: map[string]admit.LimitState{"anthropic": {Limit: l, State: throttle.State{OutputTokens: throttle.Bucket{At: t0}}}},
		Standing: map[string]admit.Standing{"anthropic": {AheadCount: 1, Ahead: []throttle.Cost{c},
			RunTime: exactly(time.Second), UsedShare: 1_100.0 / 1_500, UsedShareOutput: 0.6}},
		Now: t0,
	})
	// The one ahead waits 10 s for 1,000 output tokens at 100/s and gives 400 back at +11 s, when 100
	// more have come: 500 to go, 5 s.
	require.Equal(t, t0.Add(16*time.Second), e.Estimate)
}
