package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
)

// tsWorkerJS is the TypeScript sample's compiled worker, from this package's directory (make test
// builds it: make ts-sample).
const tsWorkerJS = "../typescript/dist/worker.js"

// TestDemoTypeScript runs the TypeScript scenario in its short configuration: two node workers
// summarise every document through the gate, and the provider never answers 429.
func TestDemoTypeScript(t *testing.T) {
	ctx := context.Background()
	s := temporaltest.Require(t, server)
	if _, err := os.Stat(tsWorkerJS); err != nil {
		testenv.Skip(t, "samples/typescript/dist is not built (make ts-sample)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Skip(t, "node is not on PATH")
	}
	cfg := TSConfig{Config: ShortConfig(), Node: node, WorkerJS: tsWorkerJS, Workers: 2}
	cfg.Progress = 0
	r, err := runTypeScript(ctx, cfg, testdb.URL(t), s.Addr, io.Discard)
	require.NoError(t, err)
	t.Logf("%+v", r)
	require.Equal(t, cfg.Docs, r.Completed, "every document summarised")
	require.Zero(t, r.RateLimited, "the provider answered no call 429")
	require.Zero(t, r.WorkflowRateLimited)
	require.GreaterOrEqual(t, r.Calls, int64(cfg.Docs))
	require.Positive(t, r.Tokens)
}

// TestTypeScriptWorkersBounded: a worker count out of range is refused by name before anything starts.
func TestTypeScriptWorkersBounded(t *testing.T) {
	for _, n := range []int{0, -1, maxTSWorkers + 1} {
		_, err := runTypeScript(context.Background(), TSConfig{Workers: n}, "", "", io.Discard)
		require.EqualError(t, err, fmt.Sprintf("-ts-workers must be from 1 to %d, got %d", maxTSWorkers, n))
	}
}

// TestProviderPeaks checks the busiest-window figures on calls placed by hand.
func TestProviderPeaks(t *testing.T) {
	p := &Provider{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	p.arrivals = []time.Time{ms(0), ms(400), ms(999), ms(1000), ms(1500), ms(3000)}
	require.EqualValues(t, 3, p.PeakRequests(time.Second), "0, 400 and 999 ms, or 400, 999 and 1,000 ms: 1,000 is a second after 0")
	require.EqualValues(t, 6, p.PeakRequests(time.Hour))
	require.Zero(t, (&Provider{}).PeakRequests(time.Second))
	p.history = []tokenEvent{{ms(0), 100}, {ms(30_000), 50}, {ms(59_999), 10}, {ms(60_000), 500}}
	require.EqualValues(t, 560, p.PeakTokens(time.Minute), "30 s, 59.999 s and 60 s")
	require.EqualValues(t, 500, p.PeakTokens(time.Millisecond))
}

// TestTSResultJSON checks the typescript scenario's -json fields, which docs/demo.md documents.
func TestTSResultJSON(t *testing.T) {
	b, err := json.Marshal(TSResult{})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.ElementsMatch(t, []string{"scenario", "completed", "calls", "rate_limited", "workflow_rate_limited", "peak_requests_1s",
		"peak_tokens_60s", "tokens", "quota_share_pct", "wall_s", "floor_s", "max_waited_s"}, slices.Collect(maps.Keys(m)))
}
