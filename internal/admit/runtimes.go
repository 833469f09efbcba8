package admit

import (
	"slices"
	"time"
)

// RunTimes is a sample of how long recent runs on a limit held it, from admission to completion,
// shortest first (NewRunTimes sorts it): what Explain expects of the tickets holding the limit and of
// those it admits ahead. It is measured from runs that ended, not inferred from a rate of admissions,
// so an idle spell does not stretch it.
type RunTimes []time.Duration

// NewRunTimes returns the sample of ds, sorted; negative run times count as 0. It does not modify ds.
func NewRunTimes(ds []time.Duration) RunTimes {
	r := make(RunTimes, len(ds))
	for i, d := range ds {
		r[i] = max(d, 0)
	}
	slices.Sort(r)
	return r
}

// Likely quantiles of a run time, and of the wait an estimate gives: the median is the point
// estimate, the 25th and 75th percentiles bound the likely range.
const (
	quantileLow  = 0.25
	quantileMid  = 0.5
	quantileHigh = 0.75
)

// Quantile returns the q-quantile of r (q in [0, 1]), by linear interpolation between the nearest
// ranks; 0 for an empty sample.
func (r RunTimes) Quantile(q float64) time.Duration {
	switch {
	case len(r) == 0:
		return 0
	case q <= 0:
		return r[0]
	case q >= 1:
		return r[len(r)-1]
	}
	pos := q * float64(len(r)-1)
	i := int(pos)
	if i+1 >= len(r) {
		return r[len(r)-1]
	}
	frac := pos - float64(i)
	return r[i] + time.Duration(frac*float64(r[i+1]-r[i]))
}

// Span is a likely duration: the point estimate (Mid) and the range that holds it half the time (Low
// to High: the 25th to 75th percentiles).
type Span struct {
	Low, Mid, High time.Duration
}

// Typical is the run time of a run about to start: the median, with the quartiles for its range.
func (r RunTimes) Typical() Span {
	return Span{Low: r.Quantile(quantileLow), Mid: r.Quantile(quantileMid), High: r.Quantile(quantileHigh)}
}

// Remaining is the time still to go of a run that has lasted elapsed: the quantiles of s - elapsed
// over the sampled runs s longer than elapsed (the runs it is like, now that it has outlasted the
// others). It reports false when no sampled run lasted longer: the run is overdue, and how long it
// still has cannot be told from the sample.
func (r RunTimes) Remaining(elapsed time.Duration) (Span, bool) {
	i, _ := slices.BinarySearch(r, elapsed+1) // the first run longer than elapsed
	if i >= len(r) {
		return Span{}, false
	}
	longer := make(RunTimes, len(r)-i)
	for j, s := range r[i:] {
		longer[j] = s - elapsed
	}
	return longer.Typical(), true
}
