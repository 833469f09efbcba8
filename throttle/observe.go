package throttle

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Observe applies what a provider's headers say (info, as of now) to a limit and its state, and
// returns the effective limit, which admission (Check, Admit, Release; CheckSpend, AdmitSpend) should
// use until the next Observe, and the new state. l is the limit as configured: the ceiling. Its
// defaults are filled in (WithDefaults) first, and the effective limit is never above it.
//
//   - The provider's real limit is learned when lower than the configured one. A per-minute figure
//     (window 0, or less than a day) lowers a rate: TokensPerMinute becomes info.TokensLimit and
//     TokenBurst at most that, and likewise InputTokensPerMinute and OutputTokensPerMinute from
//     info.InputTokens and info.OutputTokens (always per minute); RequestsPerSecond becomes
//     info.RequestsLimit/60 and Burst at most max(1, RequestsLimit/60). A burst stays >= 1.
//   - A daily figure (RequestsWindow or TokensWindow of 24h or more) never lowers a rate. It lowers
//     the Amount of each of l's allowances of its meter (MeterRequests, MeterTokens) whose period is
//     a calendar day (any zone) or a rolling 24h to the provider's limit, floored, when that is lower.
//     A longer window's figure bounds every day in it, so it is learned the same way.
//   - A provider limit below 1 is ignored. A kind of limit l does not set stays unset, and an
//     allowance l does not carry is never added: headers never add a kind of limit nor raise one.
//     The effective limit depends on info alone, not on what an earlier Observe learned: info
//     without limit figures gives back the configured limit.
//   - Nothing is admitted past what the provider says remains: the buckets are refilled to now under
//     the effective limit, then a bucket whose remaining figure is present is lowered to it, whatever
//     the figure's window. Recovery then follows the effective refill rate rather than jumping to full
//     at the provider's reset (TokensReset and RequestsReset are not used), so between now and the
//     reset the bucket may refill up to rate*(reset-now) more than the provider said remained; the
//     next response's headers correct that. Likewise, a daily figure's remaining raises what each of
//     those allowances has counted in its current window (State.Allowances) to at least its effective
//     Amount less the remaining figure, floored: the allowance has room for no more than remains.
//   - A RetryAfter after now pauses the key until then (State.Pause; an existing later pause stands),
//     at most MaxRetryAfter ahead.
//
// Observe accepts any info, not only ParseRateLimitHeaders' output: a negative, NaN or infinite
// figure is ignored. It never modifies l's Allowances nor s's Allowances map: it returns new ones
// when it changes them.
func (l Limit) Observe(s State, now time.Time, info RateLimitInfo) (Limit, State) {
	l = l.WithDefaults()
	eff := l
	reqDaily, tokDaily := info.RequestsWindow >= dailyWindow, info.TokensWindow >= dailyWindow
	for _, d := range dimensions {
		// The provider's figure is per minute; a Limit gives requests per second.
		limit, ok := info.perMinuteLimit(d, reqDaily, tokDaily)
		perUnit := limit / float64(time.Minute/d.Per())
		if rate, burst := eff.fields(d); ok && *rate > 0 && usableLimit(limit) && perUnit < *rate {
			*rate, *burst = perUnit, math.Min(*burst, math.Max(1, perUnit))
		}
	}

	s = eff.Refill(s, now)
	for d, r := range eff.Rates() {
		if remaining, has := info.remaining(d); r.IsSet() && has && finiteNonNeg(remaining) {
			b := s.Bucket(d)
			b.Level = math.Min(b.Level, remaining)
		}
	}

	if reqDaily {
		eff.Allowances, s.Allowances = eff.learnDaily(s.Allowances, now, MeterRequests, info.RequestsLimit, info.RequestsRemaining, info.HasRequestsRemaining)
	}
	if tokDaily {
		eff.Allowances, s.Allowances = eff.learnDaily(s.Allowances, now, MeterTokens, info.TokensLimit, info.TokensRemaining, info.HasTokensRemaining)
	}

	if info.RetryAfter.After(now) {
		s = s.Pause(clampInstant(info.RetryAfter, now, MaxRetryAfter))
	}
	return eff, s
}

// perMinuteLimit is the provider's limit of dimension d per minute in info, and whether it is one to
// learn a rate from: a daily figure (reqDaily, tokDaily) lowers allowances, never a rate. The input
// and output figures are always per minute.
func (info RateLimitInfo) perMinuteLimit(d Dimension, reqDaily, tokDaily bool) (float64, bool) {
	switch d {
	case DimensionRequests:
		return info.RequestsLimit, !reqDaily
	case DimensionTokens:
		return info.TokensLimit, !tokDaily
	case DimensionInputTokens:
		return info.InputTokens.Limit, true
	case DimensionOutputTokens:
		return info.OutputTokens.Limit, true
	}
	return 0, false
}

// remaining is what info says remains of dimension d, whatever the figure's window, and whether it
// says so.
func (info RateLimitInfo) remaining(d Dimension) (float64, bool) {
	switch d {
	case DimensionRequests:
		return info.RequestsRemaining, info.HasRequestsRemaining
	case DimensionTokens:
		return info.TokensRemaining, info.HasTokensRemaining
	case DimensionInputTokens:
		return info.InputTokens.Remaining, info.InputTokens.HasRemaining
	case DimensionOutputTokens:
		return info.OutputTokens.Remaining, info.OutputTokens.HasRemaining
	}
	return 0, false
}

// isDaily reports whether a counts in a day: a calendar day in any zone, or a rolling 24 hours.
func (a Allowance) isDaily() bool {
	return a.Calendar == CalendarDay || (a.Calendar == "" && a.Rolling == dailyWindow)
}

// learnDaily applies a daily figure of meter m to l's daily allowances of m and their states st at
// now (see Observe): each Amount is lowered to floor(limit) when that is usable and lower, and what
// each has counted is raised to at least its Amount less floor(remaining) when remaining is present.
// It returns l's allowances and st, each a copy when it changed and the one given otherwise.
func (l Limit) learnDaily(st AllowanceStates, now time.Time, m Meter, limit, remaining float64, hasRemaining bool) (Allowances, AllowanceStates) {
	as, asCopied, stCopied := l.Allowances, false, false
	for i, a := range l.Allowances {
		if a.Meter != m || !a.isDaily() || a.Amount <= 0 {
			continue
		}
		if usableLimit(limit) && limit < float64(a.Amount) {
			if !asCopied {
				as, asCopied = slices.Clone(as), true
			}
			a.Amount = int64(limit) // 1 <= limit < Amount: the floor
			as[i].Amount = a.Amount
		}
		if !hasRemaining || !finiteNonNeg(remaining) || remaining >= float64(a.Amount) {
			continue
		}
		floor := a.Amount - int64(remaining)
		if used := a.Used(st[a.Key()], now); used < floor {
			if !stCopied {
				st, stCopied = maps.Clone(st), true
				if st == nil {
					st = AllowanceStates{}
				}
			}
			st[a.Key()] = a.Admit(st[a.Key()], now, floor-used)
		}
	}
	return as, st
}
