package throttle

// LimitChange names the fields of a limit to change, as an operator gives them (the sluice command's
// limits set, the dashboard); a nil field keeps its value. A rate that changes without its burst
// given gets its default burst back (a burst sized for the old rate would be wrong for the new one); a
// rate given unchanged keeps its burst. The zero LimitChange changes nothing. It is a plain value,
// safe to copy; Apply is what most callers want.
type LimitChange struct {
	MaxConcurrent     *int
	RequestsPerSecond *float64
	Burst             *float64
	TokensPerMinute   *float64
	TokenBurst        *float64
	MaxInflightTokens *int64
	// The input and output budgets (Anthropic's ITPM and OTPM) and their bursts.
	InputTokensPerMinute  *float64
	InputTokenBurst       *float64
	OutputTokensPerMinute *float64
	OutputTokenBurst      *float64
}

// Apply returns l with c's fields set. The burst of a rate that changes without its burst given is
// set to 0, which WithDefaults fills in with the new rate's default. Apply does not validate: call
// WithDefaults and Validate on the result.
func (c LimitChange) Apply(l Limit) Limit {
	set := func(dst *float64, v *float64) bool {
		if v == nil || *v == *dst {
			return false
		}
		*dst = *v
		return true
	}
	if c.MaxConcurrent != nil {
		l.MaxConcurrent = *c.MaxConcurrent
	}
	if c.MaxInflightTokens != nil {
		l.MaxInflightTokens = *c.MaxInflightTokens
	}
	for _, r := range []struct {
		rate, burst       *float64
		newRate, newBurst *float64
	}{{&l.RequestsPerSecond, &l.Burst, c.RequestsPerSecond, c.Burst}, {&l.TokensPerMinute, &l.TokenBurst, c.TokensPerMinute, c.TokenBurst},
		{&l.InputTokensPerMinute, &l.InputTokenBurst, c.InputTokensPerMinute, c.InputTokenBurst},
		{&l.OutputTokensPerMinute, &l.OutputTokenBurst, c.OutputTokensPerMinute, c.OutputTokenBurst}} {
		if set(r.rate, r.newRate) {
			*r.burst = 0
		}
		if r.newBurst != nil {
			*r.burst = *r.newBurst
		}
	}
	return l
}

// Empty reports whether c changes nothing: every field is nil.
func (c LimitChange) Empty() bool { return c == LimitChange{} }
