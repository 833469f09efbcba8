package main

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAccuracy checks the figures of the explanation's estimate on samples of known errors.
func TestAccuracy(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	sample := func(waitsFor string, wait, estimate time.Duration) explainSample {
		return explainSample{Ticket: int64(wait), Activity: "SummarizeDoc", At: t0, Estimate: t0.Add(estimate), WaitsFor: waitsFor,
			Admitted: t0.Add(wait)}
	}
	samples := []explainSample{
		sample("tokens", 2*time.Second, 3*time.Second),  // 1 s late, 50% of the wait
		sample("tokens", 4*time.Second, 3*time.Second),  // 1 s early, 25%
		sample("ahead", 20*time.Second, 30*time.Second), // 10 s late, 50%
		sample("", 500*time.Millisecond, 0),             // 0.5 s early, 100%
		{Ticket: 9, At: t0, Unknown: "llm: no run has finished", WaitsFor: "concurrency", Admitted: t0.Add(time.Second)},
		{Ticket: 10, At: t0, Estimate: t0.Add(time.Second), WaitsFor: "tokens"}, // its admission not seen
	}
	t.Run("All", func(t *testing.T) {
		r := accuracy("all", samples)
		require.Equal(t, accuracyRow{Group: "all", N: 6, Known: 5, Measured: 4, AbsP50: 1, AbsP90: 10, SignedP50: -0.5, Early: 50,
			RelP50: 50, RelP90: 100, WaitP50: 2}, r)
	})
	t.Run("ByGroup", func(t *testing.T) {
		rep := newExplainReport(samples, 0)
		byGroup := map[string]accuracyRow{}
		var order []string
		for _, r := range rep.Rows {
			byGroup[r.Group] = r
			order = append(order, r.Group)
		}
		require.Equal(t, []string{"all", "tokens", "ahead", "concurrency", "nothing",
			"wait < 1s", "wait 1-10s", "wait > 10s", "admission not seen", "activity SummarizeDoc", "activity "}, order)
		require.Equal(t, 3, byGroup["tokens"].N)
		require.Equal(t, 2, byGroup["tokens"].Measured)
		require.Zero(t, byGroup["concurrency"].Known)
		require.Equal(t, 1, byGroup["wait > 10s"].Measured)
		require.InDelta(t, 10, byGroup["wait > 10s"].SignedP50, 1e-9)
		require.Equal(t, map[string]int{"llm: no run has finished": 1}, rep.Unknown)
		var out bytes.Buffer
		rep.print(&out, ModeSluice)
		require.Contains(t, out.String(), "6 explanations of 6 queued tickets")
		require.Contains(t, out.String(), "not known (1): llm: no run has finished")
	})
	t.Run("WritesJSONLines", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dir", "samples.jsonl")
		require.NoError(t, writeExplainSamples(path, samples))
		require.FileExists(t, path)
	})
}
