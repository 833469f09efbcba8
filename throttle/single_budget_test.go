package throttle_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// oldLimit is admission as it was before the input and output budgets existed (throttle at e299b85),
// kept verbatim as the reference that a limit with one combined budget must match exactly.
type oldLimit struct{ l throttle.Limit }

func (o oldLimit) refill(s throttle.State, now time.Time) throttle.State {
	l := o.l
	if l.RequestsPerSecond > 0 {
		s.Requests = s.Requests.Refill(now, l.RequestsPerSecond, l.Burst)
	}
	if l.TokensPerMinute > 0 {
		s.Tokens = s.Tokens.Refill(now, l.TokensPerMinute/60, l.TokenBurst)
	}
	return s
}

func (o oldLimit) check(s throttle.State, now time.Time, cost int64) throttle.Decision {
	l := o.l
	if cost < 0 {
		cost = 0
	}
	if now.Before(s.PausedUntil) {
		return throttle.Decision{Reason: throttle.ReasonPaused, RetryAt: s.PausedUntil}
	}
	if l.MaxConcurrent > 0 && s.InflightCount >= l.MaxConcurrent {
		return throttle.Decision{Reason: throttle.ReasonConcurrency}
	}
	if l.MaxInflightTokens > 0 && s.InflightTokens > 0 && cost > l.MaxInflightTokens-s.InflightTokens {
		return throttle.Decision{Reason: throttle.ReasonInflightTokens}
	}
	s = o.refill(s, now)
	d := throttle.Decision{Reason: throttle.ReasonNone, RetryAt: now}
	if l.RequestsPerSecond > 0 && !s.Requests.Allows(1, l.Burst) {
		d = throttle.Decision{Reason: throttle.ReasonRate, RetryAt: s.Requests.ReadyAt(1, l.RequestsPerSecond, l.Burst)}
	}
	if l.TokensPerMinute > 0 && !s.Tokens.Allows(float64(cost), l.TokenBurst) {
		at := s.Tokens.ReadyAt(float64(cost), l.TokensPerMinute/60, l.TokenBurst)
		if d.OK() {
			d = throttle.Decision{Reason: throttle.ReasonTokens, RetryAt: at}
		} else if at.After(d.RetryAt) {
			d.RetryAt = at
		}
	}
	return d
}

func (o oldLimit) admit(s throttle.State, now time.Time, cost int64) throttle.State {
	if cost < 0 {
		cost = 0
	}
	s = o.refill(s, now)
	if o.l.RequestsPerSecond > 0 {
		s.Requests = s.Requests.Take(1)
	}
	if o.l.TokensPerMinute > 0 {
		s.Tokens = s.Tokens.Take(float64(cost))
	}
	s.InflightCount++
	s.InflightTokens += cost
	return s
}

func (o oldLimit) release(s throttle.State, now time.Time, reserved, actual int64) throttle.State {
	reserved = max(0, reserved)
	var refund float64
	if actual >= 0 {
		refund = float64(reserved - actual)
	}
	s = o.refill(s, now)
	if o.l.TokensPerMinute > 0 && refund != 0 {
		s.Tokens = s.Tokens.Give(refund, o.l.TokenBurst)
	}
	s.InflightCount = max(0, s.InflightCount-1)
	s.InflightTokens = max(0, s.InflightTokens-reserved)
	return s
}

// A limit with a single combined budget (OpenAI's TPM), with or without the other kinds, and costs
// and usage given as one figure, decides and keeps its state exactly as before the input and output
// budgets existed, over random sequences of checks, admissions, releases and pauses; the input and
// output buckets it does not set are never touched.
func TestLimit_SingleBudgetBehavesAsBefore(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 1))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for seq := range 3000 {
		l := throttle.Limit{Key: "openai", TokensPerMinute: float64(1 + rng.IntN(200_000))}
		if rng.IntN(2) == 0 {
			l.TokenBurst = float64(1 + rng.IntN(20_000))
		}
		if rng.IntN(2) == 0 {
			l.RequestsPerSecond = math.Round(rng.Float64()*50*100) / 100
		}
		if rng.IntN(3) == 0 {
			l.MaxConcurrent = 1 + rng.IntN(8)
		}
		if rng.IntN(3) == 0 {
			l.MaxInflightTokens = int64(1 + rng.IntN(10_000))
		}
		l = l.WithDefaults()
		require.NoError(t, l.Validate())
		old := oldLimit{l}
		var sNew, sOld throttle.State
		now := t0
		var held []int64
		for step := range 60 {
			now = now.Add(time.Duration(rng.IntN(2_000_000)) * time.Microsecond)
			cost := int64(rng.IntN(6000)) - 50 // a few negative costs, which count as 0
			dNew, dOld := l.Check(sNew, now, cost), old.check(sOld, now, cost)
			require.Equal(t, dOld, dNew, "sequence %d step %d: check", seq, step)
			switch op := rng.IntN(10); {
			case op < 5 && dNew.OK():
				sNew, sOld = l.Admit(sNew, now, cost), old.admit(sOld, now, cost)
				held = append(held, cost)
			case op < 8 && len(held) > 0:
				i := rng.IntN(len(held))
				actual := int64(rng.IntN(8000)) - 1000 // negative: not reported
				sNew = l.Release(sNew, now, held[i], actual)
				sOld = old.release(sOld, now, held[i], actual)
				held = append(held[:i], held[i+1:]...)
			case op == 9:
				until := now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				sNew, sOld = sNew.Pause(until), sOld.Pause(until)
			}
			require.Equal(t, sOld, sNew, "sequence %d step %d: state", seq, step)
			require.Zero(t, sNew.InputTokens, "the input bucket is not set")
			require.Zero(t, sNew.OutputTokens, "the output bucket is not set")
		}
	}
}
