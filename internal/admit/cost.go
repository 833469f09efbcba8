package admit

import "github.com/sluicehq/sluice/throttle"

// RefusedCost is the actual cost to reconcile a call the provider refused (a 429) with, given the
// usage the run reported (-1 when none) and whether it reported the provider's rate-limit headers.
//
// A refused call spent its request but, unless reported otherwise, no tokens: its reservation comes
// back (0). Unless the run reported the provider's headers: those already set the bucket to what the
// provider says remains, which does not count this refused call, so giving the reservation back
// would put Sluice that much above the provider; the reservation then stands as spent (-1, "not
// reported").
func RefusedCost(reported int64, observedHeaders bool) int64 {
	if observedHeaders && reported < 0 {
		return -1
	}
	return max(reported, 0)
}

// AbandonedCost is the actual cost to Release a ticket with when it ends without reporting its usage
// because it was taken back: handed back when its owner died or stopped, or cancelled while admitted.
// A ticket that never started spent nothing: its reservation comes back (0). One that started may
// have reached the provider: its reservation stands as spent (-1, "not reported").
func AbandonedCost(started bool) int64 {
	if started {
		return -1
	}
	return 0
}

// CostOf is the cost of total tokens of which output are output tokens and the rest input: how a
// ticket's reservation is stored and given (a total, and its output part). It does not clamp; a
// reservation is validated when the ticket is written, and ReportedUsage clamps reported usage.
func CostOf(total, output int64) throttle.Cost {
	return throttle.Cost{Input: total - output, Output: output}
}

// ReportedUsage is the usage a run reported, given as its total tokens (negative: not reported) and
// the part of them of output tokens: the Cost, its output part clamped to [0, total] and the rest
// input, and true; or, when nothing was reported, the zero Cost and false. Pass both to ReleasedCost.
func ReportedUsage(total, output int64) (throttle.Cost, bool) {
	if total < 0 {
		return throttle.Cost{}, false
	}
	return CostOf(total, min(max(output, 0), total)), true
}
