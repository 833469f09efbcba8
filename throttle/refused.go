package throttle

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
