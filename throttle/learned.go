package throttle

// EffectiveLimit is the limit admission applies (Check, Admit, Release): configured, with its
// defaults filled in (WithDefaults), each rate and burst that learned sets lowered to learned's figure
// when that is lower. learned is what a provider's headers taught, as LearnedLimit keeps it: a zero
// field learned nothing, and its other fields are ignored. The result is never above configured, and a
// kind of limit configured does not set stays unset.
func EffectiveLimit(configured, learned Limit) Limit {
	l := configured.WithDefaults()
	lower := func(cur *float64, v float64) {
		if *cur > 0 && v > 0 && v < *cur {
			*cur = v
		}
	}
	lower(&l.RequestsPerSecond, learned.RequestsPerSecond)
	lower(&l.Burst, learned.Burst)
	lower(&l.TokensPerMinute, learned.TokensPerMinute)
	lower(&l.TokenBurst, learned.TokenBurst)
	lower(&l.InputTokensPerMinute, learned.InputTokensPerMinute)
	lower(&l.InputTokenBurst, learned.InputTokenBurst)
	lower(&l.OutputTokensPerMinute, learned.OutputTokensPerMinute)
	lower(&l.OutputTokenBurst, learned.OutputTokenBurst)
	return l
}

// LearnedLimit is what to keep, between observations, of an effective limit that Observe returned
// for configured: each rate and burst of effective that is above zero and below configured's (its
// defaults filled in), and zero for every other field, learned nothing included. Stored and read back,
// it gives the effective limit again: EffectiveLimit(configured, LearnedLimit(configured, effective))
// is effective for any effective that Observe returned for a configured limit that validates.
func LearnedLimit(configured, effective Limit) Limit {
	configured = configured.WithDefaults()
	below := func(eff, conf float64) float64 {
		if eff > 0 && eff < conf {
			return eff
		}
		return 0
	}
	return Limit{
		RequestsPerSecond: below(effective.RequestsPerSecond, configured.RequestsPerSecond),
		Burst:             below(effective.Burst, configured.Burst),
		TokensPerMinute:   below(effective.TokensPerMinute, configured.TokensPerMinute),
		TokenBurst:        below(effective.TokenBurst, configured.TokenBurst),

		InputTokensPerMinute:  below(effective.InputTokensPerMinute, configured.InputTokensPerMinute),
		InputTokenBurst:       below(effective.InputTokenBurst, configured.InputTokenBurst),
		OutputTokensPerMinute: below(effective.OutputTokensPerMinute, configured.OutputTokensPerMinute),
		OutputTokenBurst:      below(effective.OutputTokenBurst, configured.OutputTokenBurst),
	}
}
