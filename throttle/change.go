package throttle

// LimitChange names the fields of a limit to change, as an operator gives them (the sluice command's
// limits set, the dashboard); a nil field keeps its value. A rate that changes without its burst
// given gets its default burst back (a burst sized for the old rate would be wrong for the new one); a
// rate given unchanged keeps its burst. The zero LimitChange changes nothing. It is a plain value,
// safe to copy; Apply is what most callers want. Its JSON names are Limit's, and a field left out
// of the JSON is nil.
type LimitChange struct {
	MaxConcurrent     *int     `json:"max_concurrent,omitempty"`
	RequestsPerSecond *float64 `json:"requests_per_second,omitempty"`
	Burst             *float64 `json:"burst,omitempty"`
	TokensPerMinute   *float64 `json:"tokens_per_minute,omitempty"`
	TokenBurst        *float64 `json:"token_burst,omitempty"`
	MaxInflightTokens *int64   `json:"max_inflight_tokens,omitempty"`
	// The input and output budgets (Anthropic's ITPM and OTPM) and their bursts.
	InputTokensPerMinute  *float64 `json:"input_tokens_per_minute,omitempty"`
	InputTokenBurst       *float64 `json:"input_token_burst,omitempty"`
	OutputTokensPerMinute *float64 `json:"output_tokens_per_minute,omitempty"`
	OutputTokenBurst      *float64 `json:"output_token_burst,omitempty"`
	// Allowances, when not nil, replaces the limit's allowances: an empty list removes them all. An
	// allowance that keeps its meter and period (Allowance.Key) keeps what its window has counted.
	// What each does when spent is kept unless said (see OnSpent): one given with a zero OnSpent
	// takes the OnSpent of the limit's allowance of the same meter and period; a new one (no such
	// allowance) refuses when every allowance the limit had refuses, and otherwise keeps the zero
	// OnSpent, which waits. One given with an OnSpent of its own keeps it.
	Allowances *Allowances `json:"allowances,omitempty"`
	// OnSpent, when not nil, sets what every allowance of the limit (after Allowances) does when
	// spent. Nil keeps what each does.
	OnSpent *OnSpent `json:"on_spent,omitempty"`
}

// Apply returns l with c's fields set. The burst of a rate that changes without its burst given is
// set to 0, which WithDefaults fills in with the new rate's default; an allowance given without its
// OnSpent keeps what l's does (LimitChange.Allowances). Apply does not validate: call WithDefaults
// and Validate on the result.
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
	if c.Allowances != nil {
		had := l.Allowances
		l.Allowances = nil
		if len(*c.Allowances) > 0 {
			l.Allowances = keptOnSpent(had, *c.Allowances)
		}
	}
	if c.OnSpent != nil && len(l.Allowances) > 0 {
		l.Allowances = append(Allowances(nil), l.Allowances...)
		for i := range l.Allowances {
			l.Allowances[i].OnSpent = *c.OnSpent
		}
	}
	for _, d := range dimensions {
		rate, burst := l.fields(d)
		newRate, newBurst := c.fields(d)
		if set(rate, newRate) {
			*burst = 0
		}
		if newBurst != nil {
			*burst = *newBurst
		}
	}
	return l
}

// keptOnSpent is a copy of given, each allowance whose OnSpent is zero given the OnSpent of had's of
// the same Key, or, when had has none of that Key, OnSpentRefuse if every allowance of had refuses:
// an operator who resizes an allowance, or adds one to a plan that refuses, must not find it waiting
// without having said so.
func keptOnSpent(had, given Allowances) Allowances {
	policy := make(map[string]OnSpent, len(had))
	allRefuse := len(had) > 0
	for _, a := range had {
		policy[a.Key()] = a.OnSpent
		allRefuse = allRefuse && a.OnSpent == OnSpentRefuse
	}
	out := append(Allowances(nil), given...)
	for i, a := range out {
		if a.OnSpent != "" {
			continue
		}
		if p, ok := policy[a.Key()]; ok {
			out[i].OnSpent = p
		} else if allRefuse {
			out[i].OnSpent = OnSpentRefuse
		}
	}
	return out
}

// fields are c's fields of dimension d, as Limit.fields gives l's. d must be valid.
func (c LimitChange) fields(d Dimension) (rate, burst *float64) {
	switch d {
	case DimensionRequests:
		return c.RequestsPerSecond, c.Burst
	case DimensionTokens:
		return c.TokensPerMinute, c.TokenBurst
	case DimensionInputTokens:
		return c.InputTokensPerMinute, c.InputTokenBurst
	}
	return c.OutputTokensPerMinute, c.OutputTokenBurst
}

// Empty reports whether c changes nothing: every field is nil.
func (c LimitChange) Empty() bool { return c == LimitChange{} }
