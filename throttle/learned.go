package throttle

import "slices"

// EffectiveLimit is the limit admission applies (Check, Admit, Release; CheckSpend, AdmitSpend):
// configured, with its defaults filled in (WithDefaults), each rate and burst that learned sets
// lowered to learned's figure when that is lower, and each allowance whose Key learned's Allowances
// hold lowered to that allowance's Amount when that is lower (a daily figure Observe learned). learned
// is what a provider's headers taught, as LearnedLimit keeps it: a zero field or Amount learned
// nothing, and its other fields are ignored. The result is never above configured, a kind of limit
// configured does not set stays unset, and an allowance configured does not carry is never added.
// configured's Allowances are not modified: a lowered allowance is in a copy.
func EffectiveLimit(configured, learned Limit) Limit {
	l := configured.WithDefaults()
	lower := func(cur *float64, v float64) {
		if *cur > 0 && v > 0 && v < *cur {
			*cur = v
		}
	}
	for _, d := range dimensions {
		rate, burst := l.fields(d)
		learnedRate, learnedBurst := learned.fields(d)
		lower(rate, *learnedRate)
		lower(burst, *learnedBurst)
	}
	copied := false
	for _, la := range learned.Allowances {
		for i, a := range l.Allowances {
			if la.Amount <= 0 || la.Amount >= a.Amount || la.Key() != a.Key() {
				continue
			}
			if !copied {
				l.Allowances, copied = slices.Clone(l.Allowances), true
			}
			l.Allowances[i].Amount = la.Amount
		}
	}
	return l
}

// LearnedLimit is what to keep, between observations, of an effective limit that Observe returned
// for configured: each rate and burst of effective that is above zero and below configured's (its
// defaults filled in), zero for every other field, and in Allowances each allowance of effective
// whose Amount is above zero and below that of configured's allowance of the same Key (nil when
// there is none). Learned nothing is the zero Limit. Stored and read back, it gives the effective
// limit again: EffectiveLimit(configured, LearnedLimit(configured, effective)) equals effective
// (Limit.Equal) for any effective that Observe returned for a configured limit that validates.
func LearnedLimit(configured, effective Limit) Limit {
	configured = configured.WithDefaults()
	below := func(eff, conf float64) float64 {
		if eff > 0 && eff < conf {
			return eff
		}
		return 0
	}
	var learned Allowances
	for _, ea := range effective.Allowances {
		i := slices.IndexFunc(configured.Allowances, func(ca Allowance) bool { return ca.Key() == ea.Key() })
		if i >= 0 && ea.Amount > 0 && ea.Amount < configured.Allowances[i].Amount {
			learned = append(learned, ea)
		}
	}
	out := Limit{Allowances: learned}
	for _, d := range dimensions {
		rate, burst := out.fields(d)
		effRate, effBurst := effective.fields(d)
		confRate, confBurst := configured.fields(d)
		*rate, *burst = below(*effRate, *confRate), below(*effBurst, *confBurst)
	}
	return out
}
