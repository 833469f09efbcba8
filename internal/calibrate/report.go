package calibrate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Sample is one explanation of a waiting ticket, and the ticket's admission.
type Sample struct {
	Shape  string `json:"shape"`
	Ticket int64  `json:"ticket"`
	// At is the explanation's instant; Estimate, Low and High its expected admission and likely range
	// (zero when not known, and Unknown says why); WaitsFor what held the ticket.
	At       time.Time `json:"at"`
	Estimate time.Time `json:"estimate,omitzero"`
	Low      time.Time `json:"low,omitzero"`
	High     time.Time `json:"high,omitzero"`
	Unknown  string    `json:"unknown,omitempty"`
	WaitsFor string    `json:"waits_for"`
	// Admitted is the ticket's admission, zero until seen.
	Admitted time.Time `json:"admitted,omitzero"`
}

// WriteSamples writes the samples of rs, one JSON object a line, for other cuts than the table's.
func WriteSamples(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		for _, s := range r.Samples {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
	}
	return nil
}

// Result is one shape's play: its samples, and how much was played.
type Result struct {
	Shape, About string
	Samples      []Sample
	Rounds       int
	Completed    int
	Virtual      time.Duration // virtual time played
}

// Targets of the report: the point estimate within 10% of the wait at the median and 30% at the
// 90th percentile, and the likely range holding the admission at least half the time.
const (
	TargetP50      = 0.10
	TargetP90      = 0.30
	TargetCoverage = 0.50
)

// Stats are a shape's figures.
type Stats struct {
	Samples, Unknown int
	// P50 and P90 are percentiles of the point error |estimate - admission| / wait, over the known
	// estimates; the wait is admission - the explanation's instant.
	P50, P90 float64
	// Coverage is the share of all samples whose admission lies within [Low, High]; an unknown
	// estimate is a miss.
	Coverage float64
	// CoverageMs is Coverage with the range widened by a millisecond each way: the claims' rounding
	// (an admission a microsecond after an exact estimate) apart from real misses. Not a target.
	CoverageMs float64
	// WaitP50 is the median wait sampled.
	WaitP50 time.Duration
}

// Stats computes r's figures. Samples not yet admitted are left out (Run admits every one).
func (r Result) Stats() Stats {
	var st Stats
	var errs []float64
	var waits []float64
	covered, coveredMs := 0, 0
	for _, s := range r.Samples {
		if s.Admitted.IsZero() {
			continue
		}
		st.Samples++
		wait := s.Admitted.Sub(s.At)
		waits = append(waits, float64(wait))
		if s.Unknown != "" || s.Estimate.IsZero() {
			st.Unknown++
			continue
		}
		errs = append(errs, math.Abs(float64(s.Estimate.Sub(s.Admitted)))/float64(max(wait, time.Microsecond)))
		if !s.Admitted.Before(s.Low) && !s.Admitted.After(s.High) {
			covered++
		}
		if !s.Admitted.Before(s.Low.Add(-time.Millisecond)) && !s.Admitted.After(s.High.Add(time.Millisecond)) {
			coveredMs++
		}
	}
	st.P50, st.P90 = percentile(errs, 0.5), percentile(errs, 0.9)
	st.WaitP50 = time.Duration(percentile(waits, 0.5))
	if st.Samples > 0 {
		st.Coverage = float64(covered) / float64(st.Samples)
		st.CoverageMs = float64(coveredMs) / float64(st.Samples)
	}
	return st
}

// percentile is the q-quantile of xs by nearest rank; 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// passMiss is PASS when ok, else MISS.
func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// WriteTable writes the report's table of rs, then what each shape is.
func WriteTable(w io.Writer, rs []Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s | %7s | %7s | %8s | %8s | %8s | %8s | %8s | %-26s\n", "shape", "samples", "unknown",
		"wait p50", "err p50", "err p90", "coverage", "cov±1ms", "p50<=10% p90<=30% cov>=50%")
	fmt.Fprintln(&b, strings.Repeat("-", 123))
	for _, r := range rs {
		if r.Shape == "" {
			continue // not played (go test -run picked other shapes)
		}
		st := r.Stats()
		fmt.Fprintf(&b, "%-14s | %7d | %7d | %7.1fs | %7.1f%% | %7.1f%% | %7.1f%% | %7.1f%% | %-8s %-8s %-8s\n", r.Shape,
			st.Samples, st.Unknown, st.WaitP50.Seconds(), 100*st.P50, 100*st.P90, 100*st.Coverage, 100*st.CoverageMs,
			passMiss(st.P50 <= TargetP50), passMiss(st.P90 <= TargetP90), passMiss(st.Coverage >= TargetCoverage))
	}
	fmt.Fprintln(&b)
	for _, r := range rs {
		if r.Shape == "" {
			continue
		}
		fmt.Fprintf(&b, "%-14s %s (%d rounds, %s virtual)\n", r.Shape+":", r.About, r.Rounds, r.Virtual.Round(time.Second))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
