package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// accuracyRow is the explanation's estimate against the real admission over a group of samples.
// The error is estimate - admission: negative is early (the ticket was admitted later than said),
// positive late. The wait is admission - the explanation's instant: what the estimate predicts.
type accuracyRow struct {
	Group string `json:"group"`
	// N counts the explanations; Known those with a known estimate; Measured those of them whose
	// admission was seen, the sample of every figure below.
	N        int `json:"n"`
	Known    int `json:"known"`
	Measured int `json:"measured"`
	// AbsP50 and AbsP90 are the absolute error's, SignedP50 the signed error's median, in seconds;
	// Early the percent of estimates before the admission.
	AbsP50    float64 `json:"abs_error_p50_s"`
	AbsP90    float64 `json:"abs_error_p90_s"`
	SignedP50 float64 `json:"signed_error_p50_s"`
	Early     float64 `json:"early_pct"`
	// RelP50 and RelP90 are the absolute error in percent of the real wait; WaitP50 the real wait's
	// median, in seconds.
	RelP50  float64 `json:"rel_error_p50_pct"`
	RelP90  float64 `json:"rel_error_p90_pct"`
	WaitP50 float64 `json:"wait_p50_s"`
}

// accuracy is one row over samples, named group.
func accuracy(group string, samples []explainSample) accuracyRow {
	r := accuracyRow{Group: group, N: len(samples)}
	var abs, signed, rel, wait []float64
	early := 0
	for _, s := range samples {
		if s.Estimate.IsZero() {
			continue
		}
		r.Known++
		if s.Admitted.IsZero() {
			continue
		}
		e := s.Estimate.Sub(s.Admitted).Seconds()
		w := s.Admitted.Sub(s.At).Seconds()
		abs, signed, wait = append(abs, math.Abs(e)), append(signed, e), append(wait, w)
		// A wait under a millisecond is an admission at the explanation's instant: its share is
		// taken over a millisecond, not divided by zero.
		rel = append(rel, 100*math.Abs(e)/max(w, 0.001))
		if e < 0 {
			early++
		}
	}
	r.Measured = len(abs)
	for _, xs := range [][]float64{abs, signed, rel, wait} {
		slices.Sort(xs)
	}
	r.AbsP50, r.AbsP90, r.SignedP50 = round(quantile(abs, 0.5), 3), round(quantile(abs, 0.9), 3), roundSigned(quantile(signed, 0.5), 3)
	r.RelP50, r.RelP90, r.WaitP50 = round(quantile(rel, 0.5), 1), round(quantile(rel, 0.9), 1), round(quantile(wait, 0.5), 3)
	if r.Measured > 0 {
		r.Early = round(100*float64(early)/float64(r.Measured), 1)
	}
	return r
}

// roundSigned is round for either sign.
func roundSigned(v float64, places int) float64 {
	if v < 0 {
		return -round(-v, places)
	}
	return round(v, places)
}

// accuracyBy is a row per group of samples (key names a sample's group), the largest group first.
func accuracyBy(samples []explainSample, key func(explainSample) string, order []string) []accuracyRow {
	groups := map[string][]explainSample{}
	for _, s := range samples {
		groups[key(s)] = append(groups[key(s)], s)
	}
	names := slices.SortedFunc(maps.Keys(groups), func(a, b string) int {
		ia, ib := slices.Index(order, a), slices.Index(order, b)
		if ia >= 0 || ib >= 0 {
			return cmp.Compare(uint(ia), uint(ib)) // listed names in order, before the others
		}
		return cmp.Or(len(groups[b])-len(groups[a]), strings.Compare(a, b))
	})
	out := make([]accuracyRow, 0, len(names))
	for _, n := range names {
		out = append(out, accuracy(n, groups[n]))
	}
	return out
}

// waitsFor names a sample's wait as the table shows it.
func waitsFor(s explainSample) string { return cmp.Or(s.WaitsFor, "nothing") }

// waitBucket is a sample's real wait, in buckets.
func waitBucket(s explainSample) string {
	switch w := s.Admitted.Sub(s.At); {
	case s.Admitted.IsZero():
		return "admission not seen"
	case w < time.Second:
		return "wait < 1s"
	case w <= 10*time.Second:
		return "wait 1-10s"
	default:
		return "wait > 10s"
	}
}

// explainReport is the accuracy of the explanations of one run, overall and by group.
type explainReport struct {
	Samples, Tickets, Failures int
	ExplainP50, ExplainP90     float64 // milliseconds per Explain call
	Rows                       []accuracyRow
	Unknown                    map[string]int // why estimates were not known, counted
}

// newExplainReport computes the report of samples, with failures reads failed.
func newExplainReport(samples []explainSample, failures int) explainReport {
	rep := explainReport{Samples: len(samples), Failures: failures, Unknown: map[string]int{}}
	tickets := map[int64]bool{}
	var took []float64
	for _, s := range samples {
		tickets[s.Ticket] = true
		took = append(took, s.ExplainMS)
		if s.Unknown != "" {
			rep.Unknown[s.Unknown]++
		}
	}
	slices.Sort(took)
	rep.Tickets, rep.ExplainP50, rep.ExplainP90 = len(tickets), round(quantile(took, 0.5), 1), round(quantile(took, 0.9), 1)
	rep.Rows = append(rep.Rows, accuracy("all", samples))
	rep.Rows = append(rep.Rows, accuracyBy(samples, waitsFor, nil)...)
	rep.Rows = append(rep.Rows, accuracyBy(samples, waitBucket, []string{"wait < 1s", "wait 1-10s", "wait > 10s"})...)
	rep.Rows = append(rep.Rows, accuracyBy(samples, func(s explainSample) string { return "activity " + s.Activity }, nil)...)
	return rep
}

// print prints the report as a table.
func (rep explainReport) print(w io.Writer, mode string) {
	fmt.Fprintf(w, "\n%s: the explanation's estimate against the real admission. %d explanations of %d queued tickets, "+
		"up to %d picked at random every %s; Explain took %.1f ms p50, %.1f ms p90; %d reads failed.\n"+
		"error = estimate - admission (< 0: early, the ticket was admitted later than said); wait = admission - the explanation.\n\n",
		mode, rep.Samples, rep.Tickets, explainPick, explainEvery, rep.ExplainP50, rep.ExplainP90, rep.Failures)
	fmt.Fprintf(w, "%-24s | %5s | %6s | %8s | %9s | %9s | %10s | %6s | %11s | %11s | %8s\n", "group", "n", "known", "measured",
		"|err| p50", "|err| p90", "signed p50", "early", "|err|/wait", "|err|/wait", "wait p50")
	fmt.Fprintf(w, "%-24s | %5s | %6s | %8s | %9s | %9s | %10s | %6s | %11s | %11s | %8s\n", "", "", "%", "", "s", "s", "s", "%",
		"p50 %", "p90 %", "s")
	fmt.Fprintln(w, strings.Repeat("-", 24+5+6+8+9+9+10+6+11+11+8+3*10))
	for _, r := range rep.Rows {
		known := 0.0
		if r.N > 0 {
			known = 100 * float64(r.Known) / float64(r.N)
		}
		fmt.Fprintf(w, "%-24s | %5d | %6.1f | %8d | %9.3f | %9.3f | %+10.3f | %6.1f | %11.1f | %11.1f | %8.3f\n", r.Group, r.N, known,
			r.Measured, r.AbsP50, r.AbsP90, r.SignedP50, r.Early, r.RelP50, r.RelP90, r.WaitP50)
	}
	for _, why := range slices.Sorted(maps.Keys(rep.Unknown)) {
		fmt.Fprintf(w, "not known (%d): %s\n", rep.Unknown[why], why)
	}
}

// writeExplainSamples writes samples to path, one JSON object a line, creating its directory.
func writeExplainSamples(path string, samples []explainSample) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
