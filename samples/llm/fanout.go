package main

// The fan-out scenario (-scenario fanout): one workflow summarises documents of varied length
// concurrently, one activity each, run three times (none, temporal, sluice), two workers each.

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// runAll runs every mode of the fan-out scenario against the Postgres at dbURL and the Temporal
// server at temporalAddr, in a schema of its own that it drops at the end, printing progress to
// progress. Each result is passed to done as soon as its run ends.
func runAll(ctx context.Context, cfg Config, dbURL, temporalAddr string, progress io.Writer, done func(Result)) ([]Result, error) {
	docs := Documents(cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Seed)
	var out []Result
	err := withDemoEnv(ctx, dbURL, cfg.Pooler, temporalAddr, func(pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client) error {
		for _, mode := range cfg.Modes {
			res, err := runMode(ctx, cfg, mode, docs, pool, q, c, progress)
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

// Modes, in the order they run.
const (
	ModeNone     = "none"
	ModeTemporal = "temporal"
	ModeSluice   = "sluice"
)

// Config is one demo: the documents, the quota and the modes to run.
type Config struct {
	Docs           int
	MinLen, MaxLen int // document lengths, in characters
	Seed           uint64
	TPM, RPM       float64
	MaxTokens      int64 // max_tokens of each call
	Provider       ProviderConfig
	Modes          []string
	Progress       time.Duration // how often a progress line is printed; 0: never
	Window         time.Duration // the window of the progress line's tokens per minute
	// ExplainSample has the sluice mode sample its queued tickets' explanations and their real
	// admissions (-explain-sample; see explain_sample.go).
	ExplainSample bool
	// Pooler says how the Postgres URL reaches Postgres: directly, or through a transaction pooler
	// (-transaction-pooler, -listen-url).
	Pooler poolflags.Pooler
}

// DefaultConfig is the full demo: about a minute per mode.
func DefaultConfig() Config {
	return Config{
		Docs: 120, MinLen: 200, MaxLen: 8000, Seed: 42,
		TPM: 45_000, RPM: 300, MaxTokens: 256,
		Provider: ProviderConfig{BurstSeconds: 10, BaseLatency: 100 * time.Millisecond, PerToken: 2 * time.Millisecond},
		Modes:    []string{ModeNone, ModeTemporal, ModeSluice},
		Progress: 2 * time.Second, Window: 10 * time.Second,
	}
}

// ShortConfig is a tiny configuration, a few seconds per mode, for tests.
func ShortConfig() Config {
	c := DefaultConfig()
	c.Docs, c.MinLen, c.MaxLen = 12, 200, 2000
	c.TPM, c.RPM, c.MaxTokens = 10_000, 120, 128
	c.Provider.BaseLatency, c.Provider.PerToken = 50*time.Millisecond, time.Millisecond
	c.Progress, c.Window = time.Second, 5*time.Second
	return c
}

// SluiceLimit is the limit the sluice mode puts on the provider: its request rate with a small
// burst, and its token quota with a burst of 6 seconds' worth.
//
// The token burst must stay below the provider's own bucket (10 seconds' worth here; a real
// provider does not say how much): with equal bursts, the two buckets cap their refills and refunds
// at slightly different instants, Sluice's ends up a few dozen tokens ahead of the provider's for
// the rest of the run, and every call admitted into an almost empty bucket is refused. A smaller
// burst keeps Sluice's bucket behind the provider's, which costs only part of the first burst: both
// refill at the same rate afterwards.
func SluiceLimit(c Config) throttle.Limit {
	return throttle.Limit{
		Key:               "llm",
		RequestsPerSecond: c.RPM / 60,
		Burst:             2,
		TokensPerMinute:   c.TPM,
		TokenBurst:        c.TPM / 10,
	}
}

// Result is what one mode of the fan-out achieved. The JSON field names are the -json output; each
// figure's unit is in its name (_s: seconds, _pct: percent).
type Result struct {
	Scenario string `json:"scenario"` // "fanout"
	Mode     string `json:"mode"`
	// WallSeconds is from the workflow's start to its result; FloorSeconds the least time the quota
	// allows for the same tokens (see fanoutFloor). Lower is better, and WallSeconds cannot be below
	// FloorSeconds.
	WallSeconds  float64 `json:"wall_s"`
	FloorSeconds float64 `json:"floor_s"`
	// QuotaShare is the tokens the provider accepted as a percent of the quota over the wall time:
	// 100 x tokens / (TPM x wall minutes). Higher is better; above 100 is possible, because the
	// provider's bucket starts full.
	QuotaShare float64 `json:"quota_share_pct"`
	// RateLimited counts the 429s the provider sent. Lower is better.
	RateLimited int64 `json:"rate_limited"`
	// Retries counts the Temporal activity attempts beyond the first. Lower is better.
	Retries int64 `json:"retries"`
	// Completed counts the documents summarised.
	Completed int `json:"completed"`
	// Tokens counts the tokens the provider accepted.
	Tokens int64 `json:"-"`
	// Explain are the explanations sampled in the sluice mode with -explain-sample, and
	// ExplainFailures the sampler's failed reads.
	Explain         []explainSample `json:"-"`
	ExplainFailures int             `json:"-"`
}

// fanoutFloor is the least time in which the quota lets tokens through: the provider's bucket starts
// full, and the rest comes at the quota's rate.
func fanoutFloor(cfg Config, tokens int64) float64 {
	rate := cfg.TPM / 60
	return max(0, float64(tokens)-rate*cfg.Provider.BurstSeconds) / rate
}

// runMode runs the fan-out once, with a fresh provider and task queue and two workers.
func runMode(ctx context.Context, cfg Config, mode string, docs []Document, pool *pgxpool.Pool, q *pgqueue.Queue,
	c client.Client, progress io.Writer) (Result, error) {
	pc := cfg.Provider
	pc.TPM, pc.RPM = cfg.TPM, cfg.RPM
	provider := NewProvider(pc)
	defer provider.Close()
	llm := NewLLM(provider.URL(), cfg.MaxTokens)
	taskQueue := "llm-" + mode + "-" + randomHex(4)

	for range 2 { // two workers, as two replicas would be: every limit must hold across both
		opts := worker.Options{WorkerStopTimeout: 10 * time.Second}
		switch mode {
		case ModeNone:
		case ModeTemporal:
			// Temporal's own limit: a task queue-wide rate of activity starts, enforced by the server.
			opts.TaskQueueActivitiesPerSecond = cfg.RPM / 60
		case ModeSluice:
			plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
				Pool: pool, Client: c, Schema: q.Schema(), TracerProvider: noop.NewTracerProvider(),
				TransactionPooler: cfg.Pooler.TransactionPooler, ListenURL: cfg.Pooler.ListenURL,
				Limits: []throttle.Limit{SluiceLimit(cfg)},
				Routes: map[string]sluiceinterceptor.Route{
					"Summarize": {Limits: []string{"llm"}, Cost: EstimateTokens(cfg.MaxTokens)},
				},
			})
			if err != nil {
				return Result{}, err
			}
			opts.Plugins = []worker.Plugin{plugin}
		default:
			return Result{}, fmt.Errorf("unknown mode %q (want none, temporal or sluice)", mode)
		}
		w := worker.New(c, taskQueue, opts)
		w.RegisterWorkflow(SummarizeAll)
		w.RegisterActivity(llm)
		if err := w.Start(); err != nil {
			return Result{}, err
		}
		defer w.Stop()
	}

	start := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskQueue, TaskQueue: taskQueue}, SummarizeAll, docs)
	if err != nil {
		return Result{}, err
	}
	var sampler *explainSampler
	if mode == ModeSluice && cfg.ExplainSample {
		sampler = startExplainSampler(ctx, pool, q)
	}
	stopProgress := startProgress(cfg.Progress, progress, func() {
		queued := "-"
		if mode == ModeSluice {
			if stats, err := q.Status(ctx, "llm"); err == nil {
				for _, s := range stats {
					if s.Configured.Key == "llm" {
						queued = fmt.Sprint(s.Queued)
					}
				}
			}
		}
		ps := provider.Stats()
		tpm := provider.TokensPerMinute(cfg.Window)
		fmt.Fprintf(progress, "%-8s %5.0fs  done %3d/%d  queued %4s  in flight %3d  tpm(last %s) %7.0f (%3.0f%%)  429s %5d  retries %4d\n",
			mode, time.Since(start).Seconds(), llm.completed.Load(), len(docs), queued, ps.Inflight,
			cfg.Window, tpm, 100*tpm/cfg.TPM, ps.RateLimited, llm.retries.Load())
	})
	var completed int
	err = wr.Get(ctx, &completed)
	wall := time.Since(start)
	stopProgress()
	var samples []explainSample
	var failures int
	if sampler != nil {
		samples, failures = sampler.stop(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	ps := provider.Stats()
	return Result{
		Scenario:     "fanout",
		Mode:         mode,
		WallSeconds:  round(wall.Seconds(), 1),
		FloorSeconds: round(fanoutFloor(cfg, ps.Tokens), 1),
		QuotaShare:   round(100*float64(ps.Tokens)/(cfg.TPM*wall.Minutes()), 1),
		RateLimited:  ps.RateLimited,
		Retries:      llm.retries.Load(),
		Completed:    completed,
		Tokens:       ps.Tokens,
		Explain:      samples, ExplainFailures: failures,
	}, nil
}

// printTable prints the results side by side.
func printTable(w io.Writer, cfg Config, rs []Result) {
	fmt.Fprintf(w, "\n%d documents, quota %.0f tokens/min and %.0f requests/min, 2 workers per mode\n\n", cfg.Docs, cfg.TPM, cfg.RPM)
	fmt.Fprintf(w, "%-9s | %9s | %9s | %11s | %6s | %16s | %9s\n", "mode", "wall time", "floor", "quota share", "429s", "Temporal retries", "completed")
	fmt.Fprintf(w, "%-9s | %9s | %9s | %11s | %6s | %16s | %9s\n", "", "lower", "least", "higher", "lower", "lower", "")
	fmt.Fprintf(w, "%s\n", strings.Repeat("-", 9+3+9+3+9+3+11+3+6+3+16+3+9))
	for _, r := range rs {
		fmt.Fprintf(w, "%-9s | %8.1fs | %8.1fs | %10.1f%% | %6d | %16d | %9s\n", r.Mode, r.WallSeconds, r.FloorSeconds, r.QuotaShare,
			r.RateLimited, r.Retries, fmt.Sprintf("%d/%d", r.Completed, cfg.Docs))
	}
	// The provider's buckets start full, so a run may exceed 100%: the best possible share spends the
	// first bucketful at once and the rest at exactly the quota, with no latency.
	var tokens int64
	for _, r := range rs {
		tokens = max(tokens, r.Tokens)
	}
	if burst := cfg.TPM / 60 * cfg.Provider.BurstSeconds; float64(tokens) > burst {
		sluiceBurst := SluiceLimit(cfg).TokenBurst
		fmt.Fprintf(w, "\nfloor = the least wall time the quota allows for these %d tokens: the provider's token bucket\n"+
			"starts full (%.0fs worth), the rest comes at the quota (%.1fs with Sluice's smaller token burst, %.0f tokens).\n"+
			"quota share = tokens accepted / (quota x wall time): at best %.1f%%, %.1f%% with Sluice's burst.\n",
			tokens, cfg.Provider.BurstSeconds, max(0, float64(tokens)-min(burst, sluiceBurst))/(cfg.TPM/60), sluiceBurst,
			100*float64(tokens)/(float64(tokens)-burst), 100*float64(tokens)/(float64(tokens)-min(burst, sluiceBurst)))
	}
}
