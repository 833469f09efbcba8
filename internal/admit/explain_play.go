package admit

import (
	"container/heap"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// play plays one limit forward from its state at now (see Explain): the tickets ahead of costs are
// admitted in turn, then the ticket of cost c. It returns when the ticket is admitted, or the zero
// time and why that cannot be known.
func play(ls LimitState, st Standing, costs []throttle.Cost, c throttle.Spend, now time.Time, v variant) (time.Time, string) {
	if st.AheadCount-st.HeldElsewhere > explainHorizon {
		return time.Time{}, "more than 100,000 tickets ahead"
	}
	p := player{limit: ls.Limit, state: ls.State, at: now, runTime: st.RunTime.of(v)}
	if st.UsedShare > 0 && st.UsedShare < 1 {
		p.unused = 1 - st.UsedShare
	}
	p.unusedOutput = p.unused
	if st.UsedShareOutput > 0 && st.UsedShareOutput <= 1 {
		p.unusedOutput = 1 - st.UsedShareOutput
	}
	for _, r := range st.Releases {
		switch at := r.at(v); {
		case !at.IsZero():
			heap.Push(&p.releases, Release{At: at, Cost: r.Cost})
		case !r.Since.IsZero() && (p.overdue.IsZero() || r.Since.Before(p.overdue)):
			p.overdue = r.Since // overdue with no deadline: never counted on; the message names the longest
		}
	}
	for _, a := range costs {
		if _, why := p.admit(throttle.Spend{Tokens: a}); why != "" {
			return time.Time{}, why
		}
	}
	return p.admit(c)
}

// player is one limit played forward.
type player struct {
	limit   throttle.Limit
	state   throttle.State
	at      time.Time
	runTime time.Duration
	unused  float64 // the share of a reservation a release gives back to the buckets
	// unusedOutput is the share of the output reservation a release gives back to the output bucket.
	unusedOutput float64
	releases     releaseHeap
	overdue      time.Time // the admission of a holder overdue with no deadline, whose release is not known
}

// admit moves time on until the limit admits a ticket spending sp, admits it, and returns the
// instant; or the zero time and why that instant cannot be known. The tickets ahead are played with
// their tokens only: a money allowance counts none of their cost.
func (p *player) admit(sp throttle.Spend) (time.Time, string) {
	c := sp.Tokens
	for {
		d := p.limit.CheckSpend(p.state, p.at, sp)
		if d.OK() {
			p.state = p.limit.AdmitSpend(p.state, p.at, sp)
			if p.runTime > 0 {
				heap.Push(&p.releases, Release{At: p.at.Add(p.runTime), Cost: c})
			} else if p.unused > 0 || p.unusedOutput > 0 {
				// No run time to release it after: its slot is never counted on, but the tokens it
				// will not use come back at once rather than never.
				p.state = p.limit.ReleaseMany(p.state, p.at, throttle.Released{Refund: p.unused * float64(c.Total()),
					RefundOutput: p.unusedOutput * float64(c.Output)})
			}
			return p.at, ""
		}
		next := d.RetryAt
		if len(p.releases) > 0 && (next.IsZero() || p.releases[0].At.Before(next)) {
			next = p.releases[0].At
		}
		if next.IsZero() {
			return time.Time{}, p.never(d.Reason)
		}
		if next.After(p.at) {
			p.at = next
		} else if len(p.releases) == 0 || p.releases[0].At.After(p.at) {
			// A refusal lifting at the very instant (rounding): step on, so the play always moves.
			p.at = p.at.Add(time.Microsecond)
		}
		for len(p.releases) > 0 && !p.releases[0].At.After(p.at) {
			r := heap.Pop(&p.releases).(Release)
			p.state = p.limit.ReleaseMany(p.state, p.at, throttle.Released{Count: 1, Reserved: r.Cost.Total(),
				Refund: p.unused * float64(r.Cost.Total()), RefundOutput: p.unusedOutput * float64(r.Cost.Output)})
		}
	}
}

// never says why a wait for r has no end in sight.
func (p *player) never(r throttle.Reason) string {
	switch r {
	case throttle.ReasonConcurrency, throttle.ReasonInflightTokens:
		if !p.overdue.IsZero() {
			return "waits for a running ticket that has run longer than every recent run on the limit (admitted " +
				p.overdue.UTC().Format(time.RFC3339) + ") and has no deadline: its end cannot be told"
		}
		if p.runTime == 0 {
			return "waits for a running ticket to finish, and no run on the limit ended in the last hour to tell how long runs take"
		}
		return "waits for a running ticket whose end cannot be told"
	case throttle.ReasonAllowance:
		return "needs more than the whole allowance: no window will admit it"
	}
	return "the " + r.String() + " budget does not refill"
}

// releaseHeap orders releases by time, earliest first.
type releaseHeap []Release

func (h releaseHeap) Len() int           { return len(h) }
func (h releaseHeap) Less(i, j int) bool { return h[i].At.Before(h[j].At) }
func (h releaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *releaseHeap) Push(x any)        { *h = append(*h, x.(Release)) }
func (h *releaseHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earlierOf is the earlier of a and b.
func earlierOf(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// later reports whether estimate a is later than b, an unknown (zero) estimate being the latest.
func later(a, b time.Time) bool {
	if b.IsZero() {
		return false
	}
	return a.IsZero() || a.After(b)
}
