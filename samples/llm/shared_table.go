package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/pgqueue"
)

// runAllShared runs every mode of the shared scenario, passing each result to done as soon as its
// run ends.
func runAllShared(ctx context.Context, cfg SharedConfig, dbURL, temporalAddr string, progress io.Writer, done func(SharedResult)) ([]SharedResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	work, err := cfg.work()
	if err != nil {
		return nil, err
	}
	var out []SharedResult
	err = withDemoEnv(ctx, dbURL, cfg.Pooler, temporalAddr, func(pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client) error {
		for _, mode := range cfg.Modes {
			res, err := runShared(ctx, cfg, mode, work, pool, q, c, progress)
			if err != nil {
				return fmt.Errorf("mode %s: %w", mode, err)
			}
			out = append(out, res)
			if done != nil {
				done(res)
			}
		}
		return nil
	})
	return out, err
}

// sharedSetup says in a sentence what the scenario runs.
func sharedSetup(cfg SharedConfig) string {
	var tenants []string
	docs := 0
	for _, t := range cfg.Tenants {
		tenants = append(tenants, fmt.Sprintf("%s %d", t.Name, t.Docs))
		docs += t.Docs
	}
	return fmt.Sprintf("A backfill of %d documents (%d-%d characters) from %d tenants (%s) starts; %s after it, "+
		"a person asks the assistant a question every %s, %d in all. Both services call one provider account "+
		"allowing %.0f tokens and %.0f requests a minute, on their own task queues, served by %d worker replicas.",
		docs, cfg.MinLen, cfg.MaxLen, len(cfg.Tenants), strings.Join(tenants, ", "), cfg.Delay, cfg.Every,
		cfg.Questions, cfg.TPM, cfg.RPM, cfg.Replicas)
}

// figureRow is one figure of every mode: its name, its unit and which way is better, and its value
// in each mode, in the order of the results.
type figureRow struct {
	Name, Unit, Better string
	Values             []string
}

// resultTable is the results as a figure per row and a mode per column, for the terminal and the
// report alike.
func resultTable(rs []SharedResult) []figureRow {
	f1, f2 := func(v float64) string { return fmt.Sprintf("%.1f", v) }, func(v float64) string { return fmt.Sprintf("%.2f", v) }
	n := func(v int64) string { return fmt.Sprint(v) }
	rows := []struct {
		name, unit, better string
		value              func(SharedResult) string
	}{
		{"interactive latency p50", "s", "lower", func(r SharedResult) string { return f2(r.InteractiveP50) }},
		{"interactive latency p95", "s", "lower", func(r SharedResult) string { return f2(r.InteractiveP95) }},
		{"interactive latency max", "s", "lower", func(r SharedResult) string { return f2(r.InteractiveMax) }},
		{"provider's own answer p95", "s", "floor", func(r SharedResult) string { return f2(r.ProviderAnswerP95) }},
		{"batch completion", "s", "lower", func(r SharedResult) string { return f1(r.Batch) }},
		{"batch floor", "s", "least possible", func(r SharedResult) string { return f1(r.BatchFloor) }},
		{"429s", "calls", "lower", func(r SharedResult) string { return n(r.RateLimited) }},
		{"Temporal retries", "attempts", "lower", func(r SharedResult) string { return n(r.Retries) }},
		{"provider calls wasted", "calls", "lower", func(r SharedResult) string { return n(r.WastedCalls) }},
		{"quota share", "%", "higher", func(r SharedResult) string { return f1(r.QuotaShare) }},
		{"smallest tenant done", "s", "lower", func(r SharedResult) string { return f1(r.SmallestTenantDone) }},
		{"its fair-share bound", "s", "at most", func(r SharedResult) string { return f1(r.SmallestTenantFair) }},
		{"largest tenant done", "s", "", func(r SharedResult) string { return f1(r.LargestTenantDone) }},
		{"input estimate error, mean", "%", "lower", func(r SharedResult) string { return f2(r.InputErrorMean) }},
		{"input estimate error, max", "%", "lower", func(r SharedResult) string { return f2(r.InputErrorMax) }},
		{"chars/4 error, mean", "%", "for comparison", func(r SharedResult) string { return f2(r.CharsDiv4ErrorMean) }},
		{"chars/4 error, max", "%", "for comparison", func(r SharedResult) string { return f2(r.CharsDiv4ErrorMax) }},
		{"summaries", "docs", "all", func(r SharedResult) string { return fmt.Sprintf("%d/%d", r.Summaries, r.Docs) }},
		{"answers", "questions", "all", func(r SharedResult) string { return fmt.Sprintf("%d/%d", r.Answers, r.Questions) }},
	}
	out := make([]figureRow, len(rows))
	for i, row := range rows {
		out[i] = figureRow{Name: row.name, Unit: row.unit, Better: row.better}
		for _, r := range rs {
			out[i].Values = append(out[i].Values, row.value(r))
		}
	}
	return out
}

// printSharedTable prints the results, a figure per row and a mode per column.
func printSharedTable(w io.Writer, cfg SharedConfig, rs []SharedResult) {
	fmt.Fprintf(w, "\n%s\n\n", sharedSetup(cfg))
	fmt.Fprintf(w, "%-26s | %-9s | %-14s", "figure", "unit", "better")
	for _, r := range rs {
		fmt.Fprintf(w, " | %9s", r.Mode)
	}
	fmt.Fprintf(w, "\n%s\n", strings.Repeat("-", 26+3+9+3+14+12*len(rs)))
	for _, row := range resultTable(rs) {
		fmt.Fprintf(w, "%-26s | %-9s | %-14s", row.Name, row.Unit, row.Better)
		for _, v := range row.Values {
			fmt.Fprintf(w, " | %9s", v)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nbatch floor: the least time the quota allows for all the run's calls (the provider's buckets start full,\n"+
		"%.0f s worth, then refill at the quota). fair-share bound: when the smallest tenant's backfill ends with 1/%d of\n"+
		"what the quota leaves the backfill. quota share: tokens accepted until the backfill ended / (quota x that time).\n"+
		"input estimate error: |the route's estimate of a call's prompt tokens (openaicost) - the provider's count| / the\n"+
		"provider's count, over the run's calls; chars/4 error: the same for the old chars/4 heuristic, computed, not run.\n",
		cfg.Provider.BurstSeconds, len(cfg.Tenants))
}
