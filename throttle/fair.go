package throttle

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
// limit's virtual time is now.
func FairStart(lastFinish, now float64) float64 { return math.Max(lastFinish, now) }

// ValidateWeight reports whether w is usable as a fairness weight.
func ValidateWeight(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 || w > 1e6 {
		return fmt.Errorf("throttle: fairness Weight must be > 0 and <= 1e6, got %v", w)
	}
	return nil
}

// FairQueue is an in-memory model of the fair-share tagging that pgqueue does in SQL: it hands out
// places at enqueue and advances virtual time at admission. It is what the ordering means; pgqueue's
// tests compare against it. The zero FairQueue is ready to use; it is not safe for concurrent use.
type FairQueue struct {
	finish map[string]float64
	// Now is the virtual time: the start tag of the ticket admitted last.
	Now float64
	seq int64
}

// Enqueue returns the place of a new ticket.
func (q *FairQueue) Enqueue(priority int, fairnessKey string, cost int64, weight float64) Place {
	if q.finish == nil {
		q.finish = map[string]float64{}
	}
	start := FairStart(q.finish[fairnessKey], q.Now)
	q.finish[fairnessKey] = start + FairIncrement(cost, weight)
	q.seq++
	return Place{Priority: priority, Start: start, Seq: q.seq}
}

// Admitted advances virtual time past a ticket at p.
func (q *FairQueue) Admitted(p Place) { q.Now = math.Max(q.Now, p.Start) }
