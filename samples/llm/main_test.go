package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/internal/testdb"
)

// TestDemo runs the demo in its short configuration, every mode, so that it cannot rot.
func TestDemo(t *testing.T) {
	ctx := context.Background()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	cfg := ShortConfig()
	cfg.Progress = 0
	rs, err := runAll(ctx, cfg, testdb.URL(t), s.Addr, io.Discard, nil)
	require.NoError(t, err)
	require.Len(t, rs, 3)
	byMode := map[string]Result{}
	for _, r := range rs {
		t.Logf("%+v", r)
		require.Equal(t, cfg.Docs, r.Completed, "mode %s", r.Mode)
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

// TestResultJSON checks the -json output's fields.
func TestResultJSON(t *testing.T) {
	b, err := json.Marshal(Result{Mode: ModeSluice, Tokens: 7})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.ElementsMatch(t, []string{"mode", "wall_seconds", "quota_share", "rate_limited", "retries", "completed"}, slices.Collect(maps.Keys(m)))
}
