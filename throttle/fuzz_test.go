package throttle_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// minFuzzRate is the smallest refill rate (per second) the fuzz targets use. Below roughly 3e-4/s a
// wait of 3*burst tokens at burst 1e6 is longer than time.Duration can hold (292 years), and
// Bucket.ReadyAt's duration arithmetic overflows (see the report that came with these tests); the
// fuzz targets stay above that.
const minFuzzRate = 1e-3

// clamp maps any float, NaN and infinities included, into [lo, hi], so that the fuzzer explores
// sane limits rather than being skipped.
func clamp(x, lo, hi float64) float64 {
	switch {
	case math.IsNaN(x):
		return lo
	case x < 0:
		x = -x
	}
	return math.Min(hi, math.Max(lo, x))
}

// admission is a ticket admitted at At (seconds after the start) reserving Cost.
type admission struct {
	At   float64
	Cost float64
}

// requireRateBound checks that the admissions in every window [a_i, a_j] sum to at most
// burst + rate*(t_j - t_i), plus the overshoot of the largest oversize ticket, with a relative slack.
func requireRateBound(t *testing.T, what string, admitted []admission, rate, burst float64) {
	t.Helper()
	maxCost := 0.0
	for _, a := range admitted {
		maxCost = math.Max(maxCost, a.Cost)
	}
	oversize := math.Max(0, maxCost-burst)
	for i := range admitted {
		sum := 0.0
		for j := i; j < len(admitted); j++ {
			sum += admitted[j].Cost
			bound := burst + rate*(admitted[j].At-admitted[i].At) + oversize
			if sum > bound*(1+1e-6) {
				require.FailNowf(t, "admitted more than the rate allows",
					"%s: rate %v burst %v: admissions %d..%d in [%vs, %vs] cost %v > bound %v (max cost %v)",
					what, rate, burst, i, j, admitted[i].At, admitted[j].At, sum, bound, maxCost)
			}
		}
	}
}

// runBucketSequence drives l through a pseudo-random sequence of attempts from seed and returns what
// it admitted. cost draws a ticket's cost. It checks every Decision as it goes.
func runBucketSequence(t *testing.T, l throttle.Limit, seed uint64, scale float64, cost func(*rand.Rand) int64) []admission {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	var (
		s        throttle.State
		now      = t0
		elapsed  float64 // seconds since t0, kept apart from time.Time to measure windows
		retryAt  time.Time
		admitted []admission
	)
	for range 200 {
		var step time.Duration
		switch k := r.IntN(8); {
		case k == 0: // same instant
		case k <= 3 && !retryAt.IsZero(): // exactly when the last refusal said to come back
			step = retryAt.Sub(now)
		default:
			step = time.Duration(r.Float64() * r.Float64() * scale * float64(time.Second))
		}
		now = now.Add(step)
		elapsed += step.Seconds()

		c := cost(r)
		var d throttle.Decision
		require.NotPanics(t, func() { d = l.Check(s, now, c) })
		if !d.OK() {
			require.Contains(t, []throttle.Reason{throttle.ReasonRate, throttle.ReasonTokens}, d.Reason)
			require.False(t, d.RetryAt.IsZero(), "a positive rate always refills")
			require.False(t, d.RetryAt.Before(now), "RetryAt %v before now %v (%v)", d.RetryAt, now, d.Reason)
			retryAt = d.RetryAt
			continue
		}
		require.True(t, d.RetryAt.Equal(now))
		retryAt = time.Time{}
		s = l.Admit(s, now, c)
		s = l.Release(s, now, c, -1) // finished at once; keeps the reservation as spent
		admitted = append(admitted, admission{At: elapsed, Cost: float64(c)})
	}
	return admitted
}

func FuzzBucketNeverExceedsRate(f *testing.F) {
	f.Add(1.0, 1.0, uint64(0))
	f.Add(10.0, 10.0, uint64(1))
	f.Add(100.0, 903.0, uint64(2))
	f.Add(0.5, 3.0, uint64(3))
	f.Add(1e6, 1e6, uint64(4))
	f.Add(1e-3, 1e6, uint64(5))
	f.Add(1500.0, 1.0, uint64(6))
	f.Add(7.0/3.0, 29.0, uint64(7))
	f.Add(math.NaN(), math.Inf(1), uint64(8))
	f.Add(-3.0, -0.0, uint64(9))
	f.Add(5e-324, 1e300, uint64(10))

	f.Fuzz(func(t *testing.T, rawRate, rawBurst float64, seed uint64) {
		// Whatever the input, Check must not panic, even on a limit Validate would refuse.
		raw := throttle.Limit{Key: "raw", RequestsPerSecond: rawRate, Burst: rawBurst, TokensPerMinute: rawRate * 60, TokenBurst: rawBurst}
		require.NotPanics(t, func() {
			s := raw.Admit(throttle.State{}, t0, 3)
			raw.Check(s, t0, 5)
			raw.Check(s, t0.Add(time.Second), math.MaxInt64)
		})

		rate := clamp(rawRate, minFuzzRate, 1e6)
		burst := clamp(rawBurst, 1, 1e6)
		scale := 2 * burst / rate // seconds to refill two bursts

		t.Run("Tokens", func(t *testing.T) {
			l := throttle.Limit{Key: "fuzz", TokensPerMinute: rate * 60, TokenBurst: burst}
			require.NoError(t, l.Validate())
			perSecond := l.TokensPerMinute / 60
			admitted := runBucketSequence(t, l, seed, scale, func(r *rand.Rand) int64 {
				return r.Int64N(int64(3*burst) + 1)
			})
			requireRateBound(t, "tokens", admitted, perSecond, burst)
		})

		t.Run("Requests", func(t *testing.T) {
			l := throttle.Limit{Key: "fuzz", RequestsPerSecond: rate, Burst: burst}
			require.NoError(t, l.Validate())
			admitted := runBucketSequence(t, l, seed, scale, func(*rand.Rand) int64 { return 1 })
			requireRateBound(t, "requests", admitted, rate, burst)
		})

		t.Run("Both", func(t *testing.T) {
			// Requests at a tenth of the token rate (at least 1e-3/s), both bounds hold at once.
			rps := math.Max(minFuzzRate, rate/10)
			l := throttle.Limit{Key: "fuzz", RequestsPerSecond: rps, TokensPerMinute: rate * 60, TokenBurst: burst}.WithDefaults()
			require.NoError(t, l.Validate())
			admitted := runBucketSequence(t, l, seed, math.Max(scale, 2*l.Burst/rps), func(r *rand.Rand) int64 {
				return r.Int64N(int64(3*burst) + 1)
			})
			requireRateBound(t, "tokens", admitted, l.TokensPerMinute/60, burst)
			requests := make([]admission, len(admitted))
			for i, a := range admitted {
				requests[i] = admission{At: a.At, Cost: 1}
			}
			requireRateBound(t, "requests", requests, rps, l.Burst)
		})
	})
}

func FuzzReleaseKeepsFiguresSane(f *testing.F) {
	f.Add(60.0, 60.0, 0, int64(0), uint64(0))
	f.Add(6000.0, 29.0, 3, int64(50), uint64(1))
	f.Add(90_000.0, 10_000.0, 8, int64(20_000), uint64(2))
	f.Add(1.0, 1.0, 1, int64(1), uint64(3))
	f.Add(6e7, 1e6, 16, int64(4e6), uint64(4))
	f.Add(math.Inf(-1), math.NaN(), -5, int64(-9), uint64(5))

	f.Fuzz(func(t *testing.T, rawTPM, rawBurst float64, rawConcurrent int, rawInflight int64, seed uint64) {
		burst := clamp(rawBurst, 1, 1e6)
		maxInflight := rawInflight
		if maxInflight < 0 {
			maxInflight = -(maxInflight + 1)
		}
		l := throttle.Limit{
			Key:               "fuzz",
			TokensPerMinute:   clamp(rawTPM, minFuzzRate*60, 6e7),
			TokenBurst:        burst,
			RequestsPerSecond: clamp(rawTPM/60, minFuzzRate, 1e5),
			MaxConcurrent:     int(uint(rawConcurrent) % 17),      // 0 (no cap) to 16
			MaxInflightTokens: maxInflight % (int64(4*burst) + 1), // 0 (no cap) to 4 bursts
		}.WithDefaults()
		require.NoError(t, l.Validate())
		perSecond := l.TokensPerMinute / 60

		r := rand.New(rand.NewPCG(seed, seed))
		var (
			s        throttle.State
			now      = t0
			inflight []int64 // reservations of the tickets running, while the books are exact
			exact    = true  // false once a release that matches no ticket has been made
			maxCost  int64
		)
		for op := range 400 {
			switch k := r.IntN(20); {
			case k < 9: // admit
				cost := r.Int64N(int64(3*burst) + 1)
				d := l.Check(s, now, cost)
				if !d.OK() {
					require.False(t, !d.RetryAt.IsZero() && d.RetryAt.Before(now), "op %d: RetryAt %v before now %v", op, d.RetryAt, now)
					break
				}
				s = l.Admit(s, now, cost)
				inflight = append(inflight, cost)
				maxCost = max(maxCost, cost)
			case k < 16: // release a running ticket with a random actual
				if len(inflight) == 0 {
					break
				}
				i := r.IntN(len(inflight))
				reserved := inflight[i]
				inflight = append(inflight[:i], inflight[i+1:]...)
				actual := int64(-1) // not reported
				if r.IntN(5) > 0 {
					actual = r.Int64N(3*reserved + 2)
				}
				s = l.Release(s, now, reserved, actual)
			case k == 16: // a release that matches no running ticket (a duplicate, a lost admit)
				s = l.Release(s, now, r.Int64N(int64(3*burst)+1)-int64(burst), r.Int64N(int64(2*burst)+1)-1)
				exact = false
			case k == 17: // a clock read older than the last write
				now = now.Add(-time.Duration(r.Float64() * float64(time.Second) * burst / perSecond / 4))
			default: // time passes
				now = now.Add(time.Duration(r.Float64() * float64(time.Second) * burst / perSecond))
			}

			require.GreaterOrEqual(t, s.InflightCount, 0, "op %d", op)
			require.GreaterOrEqual(t, s.InflightTokens, int64(0), "op %d", op)
			require.False(t, math.IsNaN(s.Tokens.Level) || math.IsNaN(s.Requests.Level), "op %d: NaN level", op)
			require.LessOrEqual(t, s.Tokens.Level, l.TokenBurst, "op %d", op)
			require.LessOrEqual(t, s.Requests.Level, l.Burst, "op %d", op)
			if l.MaxConcurrent > 0 {
				require.LessOrEqual(t, s.InflightCount, l.MaxConcurrent, "op %d", op)
			}
			if l.MaxInflightTokens > 0 {
				require.LessOrEqual(t, s.InflightTokens, max(l.MaxInflightTokens, maxCost), "op %d", op)
			}
			if exact {
				sum := int64(0)
				for _, c := range inflight {
					sum += c
				}
				require.Equal(t, len(inflight), s.InflightCount, "op %d", op)
				require.Equal(t, sum, s.InflightTokens, "op %d", op)
			}
		}

		// Once everything has finished and the buckets have had time to refill, they are full again
		// and the figures are zero.
		for _, reserved := range inflight {
			s = l.Release(s, now, reserved, reserved)
		}
		if exact {
			require.Zero(t, s.InflightCount)
			require.Zero(t, s.InflightTokens)
		}
		base := now
		for _, at := range []time.Time{s.Tokens.At, s.Requests.At} {
			if at.After(base) {
				base = at
			}
		}
		wait := math.Max((l.TokenBurst-s.Tokens.Level)/perSecond, (l.Burst-s.Requests.Level)/l.RequestsPerSecond) + 1
		if wait < 100*365*24*3600 { // deep debt at a slow rate can take longer than a time.Duration holds
			later := base.Add(time.Duration(math.Ceil(wait)) * time.Second)
			require.True(t, l.Check(s, later, int64(burst)).OK())
			full := l.Admit(s, later, 0)
			require.Equal(t, l.TokenBurst, full.Tokens.Level)
			require.Equal(t, l.Burst-1, full.Requests.Level)
		}
	})
}
