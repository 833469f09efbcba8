package throttle

import (
	"math"
	"time"
)

// Observe applies what a provider's headers say (info, as of now) to a limit and its state, and
// returns the effective limit, which admission (Check, Admit, Release) should use until the next
// Observe, and the new state. l is the limit as configured: the ceiling. Its defaults are filled in
// (WithDefaults) first, and the effective limit is never above it.
//
//   - The provider's real limit is learned when lower than the configured one: TokensPerMinute
//     becomes info.TokensLimit and TokenBurst at most that, and likewise InputTokensPerMinute and
//     OutputTokensPerMinute from info.InputTokens and info.OutputTokens; RequestsPerSecond becomes
//     info.RequestsLimit/60 (the requests limit is taken as per minute, so an OpenAI per-day figure
//     only ever keeps the configured rate) and Burst at most max(1, RequestsLimit/60). A burst stays
//     >= 1. A provider limit below 1 is ignored. A kind of limit l does not set stays unset: headers
//     never add a kind of limit nor raise one. The effective limit depends on info alone, not on what
//     an earlier Observe learned: info without limit figures gives back the configured limit.
//   - Nothing is admitted past what the provider says remains: the buckets are refilled to now under
//     the effective limit, then a bucket whose remaining figure is present is lowered to it. Recovery
//     then follows the effective refill rate rather than jumping to full at the provider's reset
//     (TokensReset and RequestsReset are not used), so between now and the reset the bucket may
//     refill up to rate*(reset-now) more than the provider said remained; the next response's
//     headers correct that.
//   - A RetryAfter after now pauses the key until then (State.Pause; an existing later pause stands),
//     at most MaxRetryAfter ahead.
//
// Observe accepts any info, not only ParseRateLimitHeaders' output: a negative, NaN or infinite
// figure is ignored.
func (l Limit) Observe(s State, now time.Time, info RateLimitInfo) (Limit, State) {
	l = l.WithDefaults()
	eff := l
	learnTokens := func(rate, burst *float64, limit float64) {
		if *rate > 0 && usableLimit(limit) && limit < *rate {
			*rate, *burst = limit, math.Min(*burst, math.Max(1, limit))
		}
	}
	learnTokens(&eff.TokensPerMinute, &eff.TokenBurst, info.TokensLimit)
	learnTokens(&eff.InputTokensPerMinute, &eff.InputTokenBurst, info.InputTokens.Limit)
	learnTokens(&eff.OutputTokensPerMinute, &eff.OutputTokenBurst, info.OutputTokens.Limit)
	if l.RequestsPerSecond > 0 && usableLimit(info.RequestsLimit) && info.RequestsLimit/60 < l.RequestsPerSecond {
		perSecond := info.RequestsLimit / 60
		eff.RequestsPerSecond = perSecond
		eff.Burst = math.Min(l.Burst, math.Max(1, perSecond))
	}

	s = eff.Refill(s, now)
	lowerTo := func(rate float64, b *Bucket, has bool, remaining float64) {
		if rate > 0 && has && finiteNonNeg(remaining) {
			b.Level = math.Min(b.Level, remaining)
		}
	}
	lowerTo(eff.TokensPerMinute, &s.Tokens, info.HasTokensRemaining, info.TokensRemaining)
	lowerTo(eff.InputTokensPerMinute, &s.InputTokens, info.InputTokens.HasRemaining, info.InputTokens.Remaining)
	lowerTo(eff.OutputTokensPerMinute, &s.OutputTokens, info.OutputTokens.HasRemaining, info.OutputTokens.Remaining)
	lowerTo(eff.RequestsPerSecond, &s.Requests, info.HasRequestsRemaining, info.RequestsRemaining)

	if info.RetryAfter.After(now) {
		s = s.Pause(clampInstant(info.RetryAfter, now, MaxRetryAfter))
	}
	return eff, s
}
