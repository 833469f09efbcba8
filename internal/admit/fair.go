package admit

import (
	"cmp"
	"fmt"
	"math"
)

// Fair-share ordering is start-time fair queuing (Goyal et al.) over a fairness key (a tenant, a
// workflow) within one limit. Each fairness key keeps the virtual finish tag of its last ticket; a new
// ticket starts at the later of that tag and the limit's virtual time (the start tag of the ticket
// admitted last), and finishes cost/weight later. Tickets are admitted in order of priority, then start
// tag, then arrival. A key with weight 2 thus gets twice the share of a key with weight 1 while both have
// work queued, a key that was idle does not bank credit, and the tags are fixed at enqueue, so the claim
// is an index scan rather than a window over the queue.

// Place is a ticket's position in line within its limit.
type Place struct {
	// Priority orders first: lower values are admitted first (as Temporal's PriorityKey).
	Priority int
	// Start is the fair-share virtual start tag.
	Start float64
	// Seq is the arrival order, the last tie-breaker.
	Seq int64
}

// Compare orders places: -1 when a is admitted before b.
func (a Place) Compare(b Place) int {
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Start, b.Start), cmp.Compare(a.Seq, b.Seq))
}

// FairIncrement is how far a ticket moves its fairness key's virtual finish tag: its cost (at least
// 1, so that free tickets still take turns) divided by the key's weight.
func FairIncrement(cost int64, weight float64) float64 {
	return math.Max(1, float64(cost)) / weight
}

// FairStart is the start tag of a ticket whose fairness key last finished at lastFinish, when the
// line's virtual time is now: the later of the two, so that a key that was idle does not bank credit.
func FairStart(lastFinish, now float64) float64 { return math.Max(lastFinish, now) }

// FairTag is the place in virtual time of a ticket with fair-share increment inc (FairIncrement)
// whose fairness key last finished at lastFinish, when the line's virtual time is now: it starts at
// FairStart(lastFinish, now) and finishes inc later, which is the key's new finish tag. Virtual time
// moves only at admission (FairAdvance), so tickets enqueued together take their tags one after
// another, in the order given, each from the finish of the one before. A ticket without a fairness
// key takes FairTag(0, now, inc)'s start, now, and its finish is kept nowhere.
//
// The store tags a batch of tickets in its enqueue statement, in SQL; its tests check those tags
// against FairTag.
func FairTag(lastFinish, now, inc float64) (start, finish float64) {
	start = FairStart(lastFinish, now)
	return start, start + inc
}

// FairAdvance is a line's virtual time after it admits a ticket whose start tag is start, when it was
// now: the later of the two, so that virtual time never moves back. DecideClaim applies it.
func FairAdvance(now, start float64) float64 { return max(now, start) }

// ValidateWeight reports whether w is usable as a fairness weight.
func ValidateWeight(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 || w > 1e6 {
		return fmt.Errorf("throttle: fairness Weight must be > 0 and <= 1e6, got %v", w)
	}
	return nil
}
