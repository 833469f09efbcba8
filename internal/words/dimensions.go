package words

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// dimension is one kind of limit (concurrency, a bucket, an allowance) as it stands towards a
// ticket: its figures, the words when it holds the ticket, and how near it is to refusing (what the
// ticket needs over what there is: over 1 it refuses), to pick which to show of a limit with room.
type dimension struct {
	reason, figures, why string
	fill                 float64
}

// SpendOf is what the queued ticket t of explanation e counts against its limits: its reservation in
// tokens and in money.
func SpendOf(e throttle.Explanation, t store.Ticket) throttle.Spend {
	return throttle.Spend{Tokens: e.Cost, Money: t.CostMoney}
}

// Figures are the figures of limit l towards a ticket spending sp at now: those of the dimension
// that refuses the ticket, or of a limit with room, those of the dimension nearest to refusing:
// "concurrency 1/1", "tokens: has 400, needs 500, +1,500/s". "no limit set" for a limit that sets
// none.
func Figures(l throttle.LimitWait, sp throttle.Spend, now time.Time) string {
	if l.Reason == throttle.WaitUnknownLimit {
		return "the limit does not exist"
	}
	return cmp.Or(binding(l, sp, now).figures, "no limit set")
}

// AllFigures are the figures of every dimension limit l sets, in the order a claim checks them, a
// dot apart: "concurrency 1/20 · tokens: has 400, needs 500, +1,500/s".
func AllFigures(l throttle.LimitWait, sp throttle.Spend, now time.Time) string {
	if l.Reason == throttle.WaitUnknownLimit {
		return "the limit does not exist"
	}
	var parts []string
	for _, d := range dimensions(l, sp, now) {
		parts = append(parts, d.figures)
	}
	return cmp.Or(strings.Join(parts, " · "), "no limit set")
}

// binding is the dimension of l that refuses the ticket, or nearest to refusing it.
func binding(l throttle.LimitWait, sp throttle.Spend, now time.Time) dimension {
	if !l.Room && l.Spent != nil { // of several allowances, the one that refuses
		a := l.Spent.Allowance
		return allowanceDimension(a, l.Key, l.State.Allowances[a.Key()], sp, now)
	}
	var best dimension
	for i, d := range dimensions(l, sp, now) {
		if !l.Room && d.reason == l.Reason {
			return d
		}
		if i == 0 || d.fill > best.fill {
			best = d
		}
	}
	if best.reason == "" {
		best.why = WaitWords(l.Reason, l.Key)
	}
	return best
}

// dimensions are the kinds of limit l sets, in the order a claim checks them, as they stand towards
// a ticket spending sp at now.
func dimensions(l throttle.LimitWait, sp throttle.Spend, now time.Time) []dimension {
	lim, s, key, c := l.Limit, l.State, l.Key, sp.Tokens
	var ds []dimension
	if s.PausedUntil.After(now) {
		ds = append(ds, dimension{throttle.ReasonPaused.String(), "paused until " + Clock(s.PausedUntil, now),
			WaitWords(throttle.ReasonPaused.String(), key) + ": paused until " + Until(s.PausedUntil, now), math.Inf(1)})
	}
	if lim.MaxConcurrent > 0 {
		used := fmt.Sprintf("%d/%d", s.InflightCount, lim.MaxConcurrent)
		ds = append(ds, dimension{throttle.ReasonConcurrency.String(), "concurrency " + used,
			fmt.Sprintf("%s (%s in flight)", WaitWords(throttle.ReasonConcurrency.String(), key), used), float64(s.InflightCount+1) / float64(lim.MaxConcurrent)})
	}
	if lim.MaxInflightTokens > 0 {
		used := Grouped(s.InflightTokens) + "/" + Grouped(lim.MaxInflightTokens)
		ds = append(ds, dimension{throttle.ReasonInflightTokens.String(), fmt.Sprintf("in-flight tokens %s, needs %s", used, Grouped(c.Total())),
			fmt.Sprintf("%s: needs %s, %s in flight", WaitWords(throttle.ReasonInflightTokens.String(), key), Grouped(c.Total()), used),
			float64(s.InflightTokens+c.Total()) / float64(lim.MaxInflightTokens)})
	}
	if lim.RequestsPerSecond > 0 {
		ds = append(ds, bucketDimension(throttle.ReasonRate, key, s.Requests, 1, lim.RequestsPerSecond, lim.Burst))
	}
	for _, b := range []struct {
		reason           throttle.Reason
		perMinute, burst float64
		bucket           throttle.Bucket
		n                int64
	}{
		{throttle.ReasonTokens, lim.TokensPerMinute, lim.TokenBurst, s.Tokens, c.Total()},
		{throttle.ReasonInputTokens, lim.InputTokensPerMinute, lim.InputTokenBurst, s.InputTokens, c.Input},
		{throttle.ReasonOutputTokens, lim.OutputTokensPerMinute, lim.OutputTokenBurst, s.OutputTokens, c.Output},
	} {
		if b.perMinute > 0 {
			ds = append(ds, bucketDimension(b.reason, key, b.bucket, float64(b.n), b.perMinute/60, b.burst))
		}
	}
	for _, a := range lim.Allowances {
		ds = append(ds, allowanceDimension(a, key, s.Allowances[a.Key()], sp, now))
	}
	return ds
}

// bucketDimension is a bucket refilled at rate a second up to burst, of which a ticket takes n: it
// needs n in the bucket, or a full bucket when n is more than the burst (see throttle.Bucket).
func bucketDimension(r throttle.Reason, key string, b throttle.Bucket, n, rate, burst float64) dimension {
	label := ReasonLabel(r.String())
	need := math.Min(n, burst)
	needs := Figure(need)
	if n > burst {
		needs = fmt.Sprintf("a full bucket of %s (its %s are more than the burst)", Figure(burst), Figure(n))
	}
	fill := 0.0
	switch {
	case need <= 0:
	case b.Level <= 0:
		fill = math.Inf(1)
	default:
		fill = need / b.Level
	}
	return dimension{r.String(), fmt.Sprintf("%s: has %s, needs %s, +%s/s", label, Figure(b.Level), needs, Figure(rate)),
		fmt.Sprintf("%s: needs %s, has %s, refills %s/s", WaitWords(r.String(), key), needs, Figure(b.Level), Figure(rate)), fill}
}

// allowanceDimension is allowance a of limit key, in state st, as it stands towards a ticket spending
// sp at now: what it counted in its window, what the ticket needs, and when it resets.
func allowanceDimension(a throttle.Allowance, key string, st throttle.AllowanceState, sp throttle.Spend, now time.Time) dimension {
	used, need := a.Used(st, now), a.Of(sp)
	figures := fmt.Sprintf("%s: used %s of %s, needs %s", a, Amount(a, used), Amount(a, a.Amount), Amount(a, need))
	why := fmt.Sprintf("allowance %s of %s: used %s of %s, needs %s", a, key, Amount(a, used), Amount(a, a.Amount), Amount(a, need))
	if d := a.Check(st, now, need); !d.OK() {
		switch {
		case d.RetryAt.IsZero():
			why += "; more than the whole allowance: no window admits it"
		case a.Calendar != "":
			figures += ", resets " + Clock(d.RetryAt, now)
			why += "; resets " + Until(d.RetryAt, now)
		default:
			figures += ", room " + Clock(d.RetryAt, now)
			why += "; room again " + Until(d.RetryAt, now)
		}
	}
	return dimension{throttle.ReasonAllowance.String(), figures, why, float64(used+need) / float64(a.Amount)}
}
