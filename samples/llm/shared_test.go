package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/browsertest"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// TestDemoShared runs the shared scenario in its short configuration, every mode, writes its report
// and renders the report in a real headless Chromium: every chart must have drawn its lines.
func TestDemoShared(t *testing.T) {
	s := temporaltest.Require(t, server)
	cfg := ShortSharedConfig()
	cfg.ExplainSample = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rs, err := runAllShared(ctx, cfg, testdb.URL(t), s.Addr, io.Discard, nil)
	require.NoError(t, err)
	require.Len(t, rs, len(cfg.Modes))
	byMode := map[string]SharedResult{}
	for _, r := range rs {
		t.Logf("%+v", r)
		require.Equal(t, r.Docs, r.Summaries, "mode %s: every document summarised", r.Mode)
		require.Equal(t, r.Questions, r.Answers, "mode %s: every question answered", r.Mode)
		require.Len(t, r.Latencies, r.Questions, "mode %s", r.Mode)
		require.Positive(t, r.BatchFloor, "mode %s", r.Mode)
		require.NotEmpty(t, r.TPM, "mode %s: the provider's timeline", r.Mode)
		require.Equal(t, "hooli", r.SmallestTenant)
		byMode[r.Mode] = r
	}
	require.Zero(t, byMode[ModeSluice].RateLimited, "Sluice keeps the account under its quota")
	// No attempt was spent on a 429: the provider sent none (above). Retries are still possible, and
	// not Sluice's: an activity task Temporal lost after recording it started is retried once its
	// HeartbeatTimeout passes (see activityOptions).
	t.Logf("sluice mode: %d Temporal retries", byMode[ModeSluice].Retries)
	require.Zero(t, byMode[ModeSluice].WastedCalls)
	// -explain-sample: the sluice mode's queued tickets were explained, and their admissions seen.
	require.NotEmpty(t, byMode[ModeSluice].Explain, "explanations sampled")
	require.Positive(t, newExplainReport(byMode[ModeSluice].Explain, 0).Rows[0].Measured, "an estimate set against its admission")
	require.Empty(t, byMode[ModeNone].Explain, "only the sluice mode has tickets to explain")

	path := filepath.Join(t.TempDir(), "report.html")
	require.NoError(t, writeReportFile(path, cfg, rs))
	requireReportDraws(t, path, len(rs))
}

// chartFacts is what the page says of one drawn chart.
type chartFacts struct {
	Class   string    `json:"cls"`
	Width   float64   `json:"width"`
	Lengths []float64 `json:"lengths"` // each series path's drawn length, in pixels
}

// requireReportDraws opens the report at path in Chromium and checks that it drew modes TPM charts
// and one latency chart with modes lines, every line of non-zero length, and the results table. The
// screenshot is kept in bin/artifacts when the module has a bin directory.
func requireReportDraws(t *testing.T, path string, modes int) {
	ctx := browsertest.New(t, 2*time.Minute)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitVisible("svg.chart.latency")))
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[[]chartFacts](`[...document.querySelectorAll("svg.chart")].map(s => ({
		cls: s.getAttribute("class"), width: s.getBoundingClientRect().width,
		lengths: [...s.querySelectorAll("path.series")].map(p => p.getTotalLength())}))`))
	require.NoError(t, err)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#results tr").length`))
	require.NoError(t, err)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	var tpm, latency int
	for _, c := range charts {
		require.Positive(t, c.Width, "%s is laid out", c.Class)
		for _, l := range c.Lengths {
			require.Positive(t, l, "%s: a line drawn", c.Class)
		}
		switch c.Class {
		case "chart tpm":
			tpm++
			require.Len(t, c.Lengths, 1, "one line per tokens chart")
		case "chart latency":
			latency++
			require.Len(t, c.Lengths, modes, "a line per mode in the latency chart")
		}
	}
	require.Equal(t, modes, tpm, "a tokens chart per mode")
	require.Equal(t, 1, latency)
	require.Equal(t, 1+len(resultTable(nil)), rows, "the results table: a header and a row per figure")
	require.NotEmpty(t, png)
	browsertest.KeepScreenshot(t, "demo-report.png", png)
}

// TestSharedFigures checks the scenario's arithmetic on hand-made figures.
func TestSharedFigures(t *testing.T) {
	require.Equal(t, 0.0, quantile(nil, 0.5))
	lat := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	require.Equal(t, 5.0, quantile(lat, 0.5))
	require.Equal(t, 10.0, quantile(lat, 0.95))
	require.Equal(t, 10.0, quantile(lat, 1))

	require.Equal(t, int64(42), CompletionTokens(100, 256), "32 + prompt/10")
	require.Equal(t, int64(256), CompletionTokens(10_000, 256), "capped by max_tokens")

	// One tenant, 100 empty documents: each call is the prompt around them. The floor is the tokens
	// past the full bucket at the quota's rate; the requests (6,000 a minute) do not bind.
	cfg := SharedConfig{TPM: 6000, RPM: 6000, MaxTokens: 256, AnswerMaxTokens: 64, Every: time.Second,
		Tenants: []Tenant{{"a", 100}, {"b", 100}}, Provider: ProviderConfig{BurstSeconds: 10}}
	work, err := newSharedWork(map[string][]Document{"a": make([]Document, 100)}, nil, cfg.MaxTokens, cfg.AnswerMaxTokens)
	require.NoError(t, err)
	prompt, completion, err := callTokens(systemPrompt, instruction, cfg.MaxTokens)
	require.NoError(t, err)
	per := float64(prompt + completion)
	require.Equal(t, int64(per), work.docTokens["a"][99])
	require.Greater(t, 100*per, 1000.0)
	require.InDelta(t, (100*per-1000)/100, sharedFloor(cfg, work), 1e-9, "tokens bind: 100 a second, 1000 at first")
	require.InDelta(t, 2*100*per/100, fairShare(cfg, work, "a"), 1e-9, "half the rate for each of two tenants")
}

// TestInputError checks the estimate-error figure on counts made by hand.
func TestInputError(t *testing.T) {
	require.Equal(t, int64(3), charsDiv4("ab", "cdefghij"), "10 characters: 2.5, rounded up")
	cs := []inputCount{{Estimate: 100, CharsDiv4: 150, Provider: 100}, {Estimate: 90, CharsDiv4: 100, Provider: 100}}
	mean, largest := inputError(cs, func(c inputCount) int64 { return c.Estimate })
	require.InDelta(t, 5.0, mean, 1e-9)
	require.InDelta(t, 10.0, largest, 1e-9)
	mean, largest = inputError(cs, func(c inputCount) int64 { return c.CharsDiv4 })
	require.InDelta(t, 25.0, mean, 1e-9)
	require.InDelta(t, 50.0, largest, 1e-9)
	mean, largest = inputError(nil, func(c inputCount) int64 { return c.Estimate })
	require.Zero(t, mean)
	require.Zero(t, largest)
}

// TestProviderTimeline checks the tokens-per-minute series on calls placed by hand.
func TestProviderTimeline(t *testing.T) {
	p := &Provider{}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p.history = []tokenEvent{{t0.Add(time.Second), 600}, {t0.Add(3 * time.Second), 300}}
	tl := p.Timeline(t0, time.Second, 2*time.Second)
	require.Equal(t, []Point{{0, 0}, {1, 18000}, {2, 18000}, {3, 9000}, {4, 9000}}, tl,
		"each sample is the trailing 2 s window's tokens, per minute")
	require.Equal(t, int64(600), p.AcceptedBy(t0.Add(2*time.Second)))
}
