package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// TestDemoFanout runs the fan-out scenario in its short configuration, every mode, so that it
// cannot rot.
func TestDemoFanout(t *testing.T) {
	ctx := context.Background()
	s := temporaltest.Require(t, server)
	cfg := ShortConfig()
	cfg.Progress = 0
	rs, err := runAll(ctx, cfg, testdb.URL(t), s.Addr, io.Discard, nil)
	require.NoError(t, err)
	require.Len(t, rs, 3)
	byMode := map[string]Result{}
	for _, r := range rs {
		t.Logf("%+v", r)
		require.Equal(t, cfg.Docs, r.Completed, "mode %s", r.Mode)
		require.Positive(t, r.FloorSeconds, "mode %s", r.Mode)
		byMode[r.Mode] = r
	}
	// Twelve calls at once charge about twice the provider's token bucket: without a throttle some
	// must be refused.
	require.Positive(t, byMode[ModeNone].RateLimited)
	require.Zero(t, byMode[ModeSluice].RateLimited)
	require.Zero(t, byMode[ModeSluice].Retries)
}

// TestDocuments checks that the documents are the same on every run and of varied length.
func TestDocuments(t *testing.T) {
	cfg := DefaultConfig()
	a := Documents(cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Seed)
	require.Equal(t, a, Documents(cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Seed))
	lens := make([]int, len(a))
	for i, d := range a {
		lens[i] = len(d.Text)
	}
	require.GreaterOrEqual(t, slices.Min(lens), cfg.MinLen)
	require.LessOrEqual(t, slices.Max(lens), cfg.MaxLen)
	require.Less(t, slices.Min(lens), 400)
	require.Greater(t, slices.Max(lens), 6000)
}

// TestResultJSON checks the -json output's fields, which docs/demo.md documents.
func TestResultJSON(t *testing.T) {
	keys := func(v any) []string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return slices.Collect(maps.Keys(m))
	}
	require.ElementsMatch(t, []string{"scenario", "mode", "wall_s", "floor_s", "quota_share_pct", "rate_limited", "retries", "completed"},
		keys(Result{Mode: ModeSluice, Tokens: 7}))
	require.ElementsMatch(t, []string{"scenario", "mode", "interactive_p50_s", "interactive_p95_s", "interactive_max_s",
		"provider_answer_p95_s", "batch_s", "batch_floor_s", "rate_limited", "retries", "wasted_calls", "quota_share_pct",
		"smallest_tenant", "smallest_tenant_s", "smallest_tenant_fair_s", "largest_tenant_s",
		"input_estimate_error_mean_pct", "input_estimate_error_max_pct", "chars_div4_error_mean_pct", "chars_div4_error_max_pct",
		"summaries", "docs", "answers", "questions"},
		keys(SharedResult{TPM: []Point{{1, 2}}, Latencies: []float64{1}}))
}
