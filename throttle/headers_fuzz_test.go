package throttle_test

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// rateLimitHeaderNames are every header ParseRateLimitHeaders and ParseRetryAfter read (and the
// Anthropic output-tokens ones, which they must ignore), in the order the fuzz targets fill them
// from their newline-separated values.
var rateLimitHeaderNames = []string{
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
	"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
	"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
	"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
	"retry-after-ms", "Retry-After",
}

// fuzzHeaders sets the i-th newline-separated value of values as the i-th of rateLimitHeaderNames.
func fuzzHeaders(values string) http.Header {
	h := http.Header{}
	for i, v := range strings.SplitN(values, "\n", len(rateLimitHeaderNames)) {
		h.Set(rateLimitHeaderNames[i], v)
	}
	return h
}

// headerValues lays named values out as fuzzHeaders reads them.
func headerValues(kv ...string) string {
	vals := make([]string, len(rateLimitHeaderNames))
	for i := 0; i+1 < len(kv); i += 2 {
		for j, name := range rateLimitHeaderNames {
			if strings.EqualFold(name, kv[i]) {
				vals[j] = kv[i+1]
			}
		}
	}
	return strings.Join(vals, "\n")
}

// headerSeeds are realistic and hostile header sets, laid out as fuzzHeaders reads them: every
// hostile value is also tried in every header at once.
func headerSeeds() []string {
	hostile := []string{
		"", " ", "NaN", "nan", "Inf", "+Inf", "-Inf", "infinity", "-1", "-0", "-5s", "1e308", "1e400", "-1e400", "1e-400",
		"99999999999999999999", "9" + strings.Repeat("9", 400), "0x10", "0x1p4", "1_000", "1.2.3", "5x", "s", ".", "+", "e5",
		"9999999999999999999h", "2562047h47m16.854775808s", "1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h",
		"0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-13-01T00:00:00Z", "Wed, 21 Oct 2015 07:28:00 GMT",
		"Fri, 31 Dec 9999 23:59:59 GMT", "\x00", "µs", "1.5µs", "1μs", "5S",
	}
	seeds := []string{
		headerValues(
			"x-ratelimit-limit-requests", "10000", "x-ratelimit-remaining-requests", "9999", "x-ratelimit-reset-requests", "6ms",
			"x-ratelimit-limit-tokens", "90000", "x-ratelimit-remaining-tokens", "89000", "x-ratelimit-reset-tokens", "6m0s"),
		headerValues(
			"x-ratelimit-limit-requests", "200", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "17h12m0.96s",
			"x-ratelimit-limit-tokens", "40000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1h2m3.5s",
			"retry-after-ms", "1500", "Retry-After", "2"),
		headerValues(
			"anthropic-ratelimit-requests-limit", "4000", "anthropic-ratelimit-requests-remaining", "3999", "anthropic-ratelimit-requests-reset", "2026-01-01T00:00:01Z",
			"anthropic-ratelimit-tokens-limit", "400000", "anthropic-ratelimit-tokens-remaining", "398000", "anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:18Z",
			"anthropic-ratelimit-input-tokens-limit", "300000", "anthropic-ratelimit-input-tokens-remaining", "299000", "anthropic-ratelimit-input-tokens-reset", "2026-01-01T00:00:12Z",
			"anthropic-ratelimit-output-tokens-limit", "100000", "anthropic-ratelimit-output-tokens-remaining", "99000", "anthropic-ratelimit-output-tokens-reset", "2026-01-01T00:00:36Z"),
		headerValues(
			"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "12", "anthropic-ratelimit-input-tokens-reset", "2026-01-01T01:00:30+01:00",
			"Retry-After", "Thu, 01 Jan 2026 00:00:20 GMT"),
		headerValues("x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "5000", "x-ratelimit-reset-tokens", "25h", "Retry-After", "99999999999999999999"),
		headerValues("anthropic-ratelimit-tokens-reset", "2025-12-31T23:59:00Z", "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT", "retry-after-ms", "soon"),
		"",
	}
	for _, v := range hostile {
		vals := make([]string, len(rateLimitHeaderNames))
		for i := range vals {
			vals[i] = v
		}
		seeds = append(seeds, strings.Join(vals, "\n"))
	}
	return seeds
}

// requireSaneInfo checks the promises RateLimitInfo's documentation makes for now.
func requireSaneInfo(t *testing.T, info throttle.RateLimitInfo, now time.Time) {
	t.Helper()
	for _, f := range []struct {
		name string
		v    float64
	}{{"RequestsLimit", info.RequestsLimit}, {"RequestsRemaining", info.RequestsRemaining}, {"TokensLimit", info.TokensLimit}, {"TokensRemaining", info.TokensRemaining}} {
		require.False(t, math.IsNaN(f.v) || math.IsInf(f.v, 0), "%s: %v", f.name, f.v)
		require.GreaterOrEqual(t, f.v, 0.0, f.name)
		require.False(t, math.Signbit(f.v), "%s: negative zero", f.name)
	}
	if info.RequestsLimit > 0 && info.RequestsRemaining > 0 {
		require.LessOrEqual(t, info.RequestsRemaining, info.RequestsLimit)
	}
	if info.TokensLimit > 0 && info.TokensRemaining > 0 {
		require.LessOrEqual(t, info.TokensRemaining, info.TokensLimit)
	}
	if !info.HasRequestsRemaining {
		require.Zero(t, info.RequestsRemaining)
	}
	if !info.HasTokensRemaining {
		require.Zero(t, info.TokensRemaining)
	}
	within := func(name string, at time.Time, ceiling time.Duration) {
		t.Helper()
		if at.IsZero() {
			return
		}
		require.False(t, at.Before(now), "%s %v before now %v", name, at, now)
		require.False(t, at.After(now.Add(ceiling)), "%s %v after now+%v", name, at, ceiling)
	}
	within("RequestsReset", info.RequestsReset, 24*time.Hour)
	within("TokensReset", info.TokensReset, 24*time.Hour)
	within("RetryAfter", info.RetryAfter, throttle.MaxRetryAfter)
}

func FuzzParseRateLimitHeaders(f *testing.F) {
	for i, v := range headerSeeds() {
		f.Add(v, int64(i)*int64(time.Hour))
	}
	f.Add(headerValues("x-ratelimit-reset-tokens", "1s"), int64(math.MaxInt64))
	f.Add(headerValues("x-ratelimit-reset-tokens", "1s"), int64(math.MinInt64))

	f.Fuzz(func(t *testing.T, values string, offset int64) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		now := t0.Add(time.Duration(offset))
		h := fuzzHeaders(values)

		var info throttle.RateLimitInfo
		require.NotPanics(t, func() { info = throttle.ParseRateLimitHeaders(h, now) })
		requireSaneInfo(t, info, now)

		at, ok := throttle.ParseRetryAfter(h, now)
		require.Equal(t, ok, !at.IsZero(), "ok %v with instant %v", ok, at)
		require.True(t, at.Equal(info.RetryAfter), "ParseRetryAfter %v, RateLimitInfo.RetryAfter %v", at, info.RetryAfter)

		// Where time.ParseDuration reads the OpenAI token reset, the instant agrees with it (up to
		// float rounding), clamped to a day.
		if v := h.Get("x-ratelimit-reset-tokens"); v != "" && !strings.HasPrefix(v, "-") {
			if d, err := time.ParseDuration(v); err == nil {
				want := now.Add(min(d, 24*time.Hour))
				diff := info.TokensReset.Sub(want)
				require.True(t, diff.Abs() <= time.Microsecond, "reset %q: want now%+v, got now%+v", v, want.Sub(now), info.TokensReset.Sub(now))
			}
		}
	})
}

// fuzzClamp maps any float, NaN and infinities included, into [lo, hi].
func fuzzClamp(x, lo, hi float64) float64 {
	switch {
	case math.IsNaN(x):
		return lo
	case x < 0:
		x = -x
	}
	return math.Min(hi, math.Max(lo, x))
}

// notAbove reports whether an effective field is at most its configured value (a NaN configured by
// a limit that does not validate must stay NaN).
func notAbove(eff, conf float64) bool {
	return eff <= conf || (math.IsNaN(eff) && math.IsNaN(conf)) || eff == conf
}

func FuzzObserveNeverRaisesLimit(f *testing.F) {
	seeds := headerSeeds()
	for i, v := range seeds {
		kinds := uint8(i*37) | 3
		f.Add(10.0, 0.0, 90_000.0, 0.0, kinds, v, 60.0, 0.0, 30_000.0, 1000.0, uint64(i))
	}
	f.Add(5.0, 50.0, 60_000.0, 5000.0, uint8(0x3f), seeds[0], 6e6, 6e6, 6e8, 6e8, uint64(100))
	f.Add(1e-3, 1e6, 0.06, 1e6, uint8(0xb3), seeds[1], math.NaN(), math.Inf(1), -1.0, math.Inf(-1), uint64(101))
	f.Add(1e6, 1.0, 6e7, 1.0, uint8(0x83), seeds[2], 0.5, -0.0, 5e-324, 1e308, uint64(102))
	f.Add(math.NaN(), math.Inf(1), -3.0, 1e300, uint8(0x43), seeds[3], 1.0, 1.0, 1.0, 1.0, uint64(103))
	f.Add(0.0, 0.0, 0.0, 0.0, uint8(0x0c), seeds[4], 60.0, 0.0, 1000.0, 0.0, uint64(104))

	f.Fuzz(func(t *testing.T, rawRPS, rawBurst, rawTPM, rawTokenBurst float64, kinds uint8, values string,
		reqLimit, reqRemaining, tokLimit, tokRemaining float64, seed uint64) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

		// The configured limit: bit 0 a request rate, bit 1 a token rate, bits 2 and 3 the caps, bits 4
		// and 5 explicit bursts, bit 6 the raw floats as given (possibly invalid), bit 7 a hand-built
		// RateLimitInfo rather than parsed headers.
		cfg := throttle.Limit{Key: "fuzz"}
		if kinds&1 != 0 {
			cfg.RequestsPerSecond = fuzzClamp(rawRPS, 1e-3, 1e6)
			if kinds&16 != 0 {
				cfg.Burst = fuzzClamp(rawBurst, 1, 1e6)
			}
		}
		if kinds&2 != 0 {
			cfg.TokensPerMinute = fuzzClamp(rawTPM, 0.06, 6e7)
			if kinds&32 != 0 {
				cfg.TokenBurst = fuzzClamp(rawTokenBurst, 1, 1e6)
			}
		}
		if kinds&4 != 0 {
			cfg.MaxConcurrent = 1 + int(seed%16)
		}
		if kinds&8 != 0 {
			cfg.MaxInflightTokens = 1 + int64(seed%100_000)
		}
		if kinds&64 != 0 {
			cfg.RequestsPerSecond, cfg.Burst, cfg.TokensPerMinute, cfg.TokenBurst = rawRPS, rawBurst, rawTPM, rawTokenBurst
		}
		configured := cfg.WithDefaults()
		valid := configured.Validate() == nil

		// A state the configured limit produced: admissions (some into debt), releases, time passing.
		var s throttle.State
		now := t0
		cost := func() int64 {
			c := math.Max(configured.TokenBurst, configured.Burst)
			if !(c >= 1 && c <= 1e7) {
				c = 1000
			}
			return r.Int64N(int64(2*c) + 1)
		}
		require.NotPanics(t, func() {
			var running []int64
			for range r.IntN(24) {
				switch k := r.IntN(10); {
				case k < 4:
					if c := cost(); configured.Check(s, now, c).OK() {
						s = configured.Admit(s, now, c)
						running = append(running, c)
					}
				case k == 4: // admitted elsewhere: may run into debt
					c := cost()
					s = configured.Admit(s, now, c)
					running = append(running, c)
				case k < 7 && len(running) > 0:
					c := running[0]
					running = running[1:]
					s = configured.Release(s, now, c, r.Int64N(2*c+2)-1)
				case k == 7:
					s = s.Pause(now.Add(time.Duration(r.Int64N(int64(2 * time.Minute)))))
				default:
					now = now.Add(time.Duration(r.Int64N(int64(2 * time.Minute))))
				}
			}
		})
		// Observe at now, or a little before the buckets' last write (a clock behind another's).
		if r.IntN(4) == 0 {
			now = now.Add(-time.Duration(r.Int64N(int64(10 * time.Second))))
		}

		var info throttle.RateLimitInfo
		if kinds&128 != 0 {
			info = throttle.RateLimitInfo{
				RequestsLimit: reqLimit, RequestsRemaining: reqRemaining, HasRequestsRemaining: r.IntN(4) > 0,
				TokensLimit: tokLimit, TokensRemaining: tokRemaining, HasTokensRemaining: r.IntN(4) > 0,
			}
			switch r.IntN(3) {
			case 0:
				info.RetryAfter = now.Add(time.Duration(r.Int64()) - math.MaxInt64/2)
			case 1:
				info.RetryAfter = now.Add(time.Duration(r.Int64N(int64(2 * time.Hour))))
			}
		} else {
			info = throttle.ParseRateLimitHeaders(fuzzHeaders(values), now)
			requireSaneInfo(t, info, now)
		}

		before := s
		var (
			eff throttle.Limit
			got throttle.State
		)
		require.NotPanics(t, func() { eff, got = cfg.Observe(s, now, info) })

		// Never above the ceiling; the caps and key untouched; a kind stays set or unset.
		require.Equal(t, configured.Key, eff.Key)
		require.Equal(t, configured.MaxConcurrent, eff.MaxConcurrent)
		require.Equal(t, configured.MaxInflightTokens, eff.MaxInflightTokens)
		for _, fld := range []struct {
			name      string
			eff, conf float64
		}{
			{"RequestsPerSecond", eff.RequestsPerSecond, configured.RequestsPerSecond},
			{"Burst", eff.Burst, configured.Burst},
			{"TokensPerMinute", eff.TokensPerMinute, configured.TokensPerMinute},
			{"TokenBurst", eff.TokenBurst, configured.TokenBurst},
		} {
			require.True(t, notAbove(fld.eff, fld.conf), "%s: effective %v above configured %v", fld.name, fld.eff, fld.conf)
			require.Equal(t, fld.conf > 0, fld.eff > 0, "%s: effective %v, configured %v: a kind was added or removed", fld.name, fld.eff, fld.conf)
		}
		// The figures are not Observe's business.
		require.Equal(t, before.InflightCount, got.InflightCount)
		require.Equal(t, before.InflightTokens, got.InflightTokens)
		// A pause only grows, and by at most MaxRetryAfter from now.
		require.False(t, got.PausedUntil.Before(before.PausedUntil))
		if got.PausedUntil.After(before.PausedUntil) {
			require.False(t, got.PausedUntil.After(now.Add(throttle.MaxRetryAfter)))
			require.True(t, got.PausedUntil.Equal(info.RetryAfter) || got.PausedUntil.Equal(now.Add(throttle.MaxRetryAfter)))
		}
		if info.RetryAfter.After(now) {
			require.False(t, got.PausedUntil.Before(info.RetryAfter) && got.PausedUntil.Before(now.Add(throttle.MaxRetryAfter)),
				"RetryAfter %v not honoured: paused until %v", info.RetryAfter, got.PausedUntil)
		}

		if !valid {
			// A limit that does not validate must not panic (checked above); its arithmetic may be NaN.
			require.NotPanics(t, func() { eff.Check(got, now, 1) })
			return
		}
		require.NoError(t, eff.Validate(), "configured %+v, info %+v", configured, info)
		// What is kept of it gives it back: the engine stores LearnedLimit and reads EffectiveLimit.
		require.Equal(t, eff, throttle.EffectiveLimit(cfg, throttle.LearnedLimit(cfg, eff)), "configured %+v, info %+v", configured, info)
		for _, lvl := range []float64{got.Tokens.Level, got.Requests.Level} {
			require.False(t, math.IsNaN(lvl) || math.IsInf(lvl, 0), "level %v", lvl)
		}
		if eff.TokensPerMinute > 0 {
			require.LessOrEqual(t, got.Tokens.Level, eff.TokenBurst)
			if info.HasTokensRemaining && info.TokensRemaining >= 0 && !math.IsInf(info.TokensRemaining, 1) {
				require.LessOrEqual(t, got.Tokens.Level, info.TokensRemaining, "admits past what the provider says remains")
			}
		} else {
			require.Equal(t, before.Tokens, got.Tokens)
		}
		if eff.RequestsPerSecond > 0 {
			require.LessOrEqual(t, got.Requests.Level, eff.Burst)
			if info.HasRequestsRemaining && info.RequestsRemaining >= 0 && !math.IsInf(info.RequestsRemaining, 1) {
				require.LessOrEqual(t, got.Requests.Level, info.RequestsRemaining, "admits past what the provider says remains")
			}
		} else {
			require.Equal(t, before.Requests, got.Requests)
		}

		// Admission under the effective limit stays sane.
		c := cost()
		d := eff.Check(got, now, c)
		require.False(t, !d.RetryAt.IsZero() && d.RetryAt.Before(now), "RetryAt %v before now %v", d.RetryAt, now)
		if d.OK() && c > 0 && info.HasTokensRemaining && eff.TokensPerMinute > 0 && info.TokensRemaining >= 0 && !math.IsInf(info.TokensRemaining, 1) {
			require.LessOrEqual(t, math.Min(float64(c), eff.TokenBurst), info.TokensRemaining, "admitted %d past %v remaining", c, info.TokensRemaining)
		}
	})
}
