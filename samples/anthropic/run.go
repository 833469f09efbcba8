package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Modes, in the order they run by default.
const (
	// ModeSluice is one Sluice limit with the provider's three quotas: requests, input tokens and
	// output tokens per minute.
	ModeSluice = "sluice"
	// ModeInputOnly is the same route, with a limit that has no output budget: the requests and the
	// input tokens per minute only, a single token budget as one would write it before the output
	// dimension existed.
	ModeInputOnly = "input-only"
	// ModeNone is no throttle: Temporal's default retry policy retries the 429s.
	ModeNone = "none"
)

// limitKey is the Sluice limit of the provider account.
const limitKey = "anthropic"

// Config is one run: the documents, the provider and the modes.
type Config struct {
	Docs               int
	MinWords, MaxWords int // document lengths
	Seed               uint64
	MaxTokens          int64 // max_tokens of each call
	Provider           ProviderConfig
	Workers            int // workers per mode, as replicas would be: every limit must hold across them
	Modes              []string
	Progress           time.Duration // how often a progress line is printed; 0: never
	// Pooler says how the Postgres URL reaches Postgres: directly, or through a transaction pooler
	// (-transaction-pooler, -listen-url).
	Pooler poolflags.Pooler
}

// DefaultConfig is the full run: a tight output budget (8,000 output tokens a minute against 200,000
// input tokens and 600 requests) that binds first, with max_tokens 300 and answers of about 100 to
// 300 tokens. About 80 seconds in the sluice mode.
func DefaultConfig() Config {
	return Config{
		Docs: 60, MinWords: 400, MaxWords: 2500, Seed: 7, MaxTokens: 300,
		Provider: ProviderConfig{
			RPM: 600, ITPM: 200_000, OTPM: 8_000, BurstSeconds: 5,
			BaseLatency: 200 * time.Millisecond, PerOutputToken: 2 * time.Millisecond,
			OutputBase: 60, OutputPerInput: 0.1,
		},
		Workers: 2,
		// none is left out by default: Temporal's default retry policy backs off to 100 s between
		// attempts, and the run took 40 minutes here (-modes sluice,input-only,none).
		Modes:    []string{ModeSluice, ModeInputOnly},
		Progress: 5 * time.Second,
	}
}

// ShortConfig is the same shape with three times the quota: about 25 s per mode, for tests. The
// output quota over its busy period is still more than five times the output bucket, so that the
// share of it is a figure of the throttle's steady pace, not of the first burst.
func ShortConfig() Config {
	c := DefaultConfig()
	c.Provider.RPM, c.Provider.ITPM, c.Provider.OTPM = 3*600, 3*200_000, 3*8_000
	c.Provider.BaseLatency, c.Provider.PerOutputToken = 100*time.Millisecond, time.Millisecond
	c.Progress = 0
	return c
}

// BurstMargin is how much smaller Sluice's buckets are than the provider's, in seconds of each rate.
//
// Sluice charges a call when it admits it, the provider when the request arrives, a moment later.
// While the provider's bucket is full, that moment's refill is lost to it but not to Sluice's, so
// with equal bursts Sluice ends the first burst ahead of the provider by the rate times the delay
// from its first admission to the provider's first request (0.15 s was seen on a loaded 2-core
// machine), and stays ahead: every call it then admits into an almost empty bucket is refused. A
// margin of the rate times a delay longer than that keeps Sluice's bucket behind the provider's; it
// costs about the margin less that delay, once, out of the first burst.
const BurstMargin = 0.5

// SluiceLimit is the limit of the provider account in mode (sluice or input-only): the provider's
// quotas, with its bursts less BurstMargin.
func SluiceLimit(pc ProviderConfig, mode string) throttle.Limit {
	bs := pc.BurstSeconds - BurstMargin
	l := throttle.Limit{
		Key:                  limitKey,
		RequestsPerSecond:    pc.RPM / 60,
		Burst:                max(1, float64(int64(pc.RPM/60*bs))),
		InputTokensPerMinute: pc.ITPM,
		InputTokenBurst:      pc.ITPM / 60 * bs,
	}
	if mode == ModeSluice {
		l.OutputTokensPerMinute, l.OutputTokenBurst = pc.OTPM, pc.OTPM/60*bs
	}
	return l
}

// Result is what one mode achieved. The JSON field names are the -json output; each figure's unit is
// in its name (_s: seconds, _pct: percent).
type Result struct {
	Mode string `json:"mode"`
	// WallSeconds is from the workflow's start to its result; BusySeconds from the provider's first
	// admission to its last (see Use).
	WallSeconds float64 `json:"wall_s"`
	BusySeconds float64 `json:"busy_s"`
	// RateLimited counts the 429s the provider sent; Retries the Temporal attempts beyond the first.
	RateLimited int64 `json:"rate_limited"`
	Retries     int64 `json:"retries"`
	// The use of each quota over the busy period, in percent (see Use).
	RequestsShare float64 `json:"requests_share_pct"`
	InputShare    float64 `json:"input_share_pct"`
	OutputShare   float64 `json:"output_share_pct"`
	// EstimateErrorMean and EstimateErrorMax are the route's input estimate (count_tokens) against
	// the provider's count of each answered call's prompt, in percent of the provider's count.
	EstimateErrorMean float64 `json:"estimate_error_mean_pct"`
	EstimateErrorMax  float64 `json:"estimate_error_max_pct"`
	// Completed counts the documents summarised, out of Docs.
	Completed int `json:"completed"`
	Docs      int `json:"docs"`

	use Use // unrounded, for tests
}

// runAll runs every mode against the Postgres at dbURL and the Temporal server at temporalAddr, in a
// schema of its own that it drops at the end, printing progress to progress. Each result is passed to
// done (if not nil) as soon as its run ends.
func runAll(ctx context.Context, cfg Config, dbURL, temporalAddr string, progress io.Writer, done func(Result)) ([]Result, error) {
	var out []Result
	err := withEnv(ctx, dbURL, cfg.Pooler, temporalAddr, func(pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client) error {
		for _, mode := range cfg.Modes {
			res, err := runMode(ctx, cfg, mode, pool, q, c, progress)
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

// startWorkers starts cfg.Workers workers on taskQueue, with the Sluice plugin in the modes that
// have one, and returns what stops them.
func startWorkers(cfg Config, mode, taskQueue string, s *Summarizer, pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client) (func(), error) {
	var ws []worker.Worker
	stop := func() {
		for _, w := range ws {
			w.Stop()
		}
	}
	for range cfg.Workers {
		opts := worker.Options{WorkerStopTimeout: 10 * time.Second}
		if mode != ModeNone {
			plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
				Pool: pool, Client: c, Schema: q.Schema(), TracerProvider: noop.NewTracerProvider(),
				TransactionPooler: cfg.Pooler.TransactionPooler, ListenURL: cfg.Pooler.ListenURL,
				Limits: []throttle.Limit{SluiceLimit(cfg.Provider, mode)},
				Routes: map[string]sluiceinterceptor.Route{
					"Summarize": {Limits: []string{limitKey}, Tokens: RouteTokens(cfg.MaxTokens)},
				},
			})
			if err != nil {
				stop()
				return nil, err
			}
			opts.Plugins = []worker.Plugin{plugin}
		}
		w := worker.New(c, taskQueue, opts)
		w.RegisterWorkflow(SummarizeAll)
		w.RegisterActivity(s)
		if err := w.Start(); err != nil {
			stop()
			return nil, err
		}
		ws = append(ws, w)
	}
	return stop, nil
}

// runMode runs the fan-out once, with a fresh provider and task queue.
func runMode(ctx context.Context, cfg Config, mode string, pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client, progress io.Writer) (Result, error) {
	switch mode {
	case ModeSluice, ModeInputOnly, ModeNone:
	default:
		return Result{}, fmt.Errorf("unknown mode %q (want sluice, input-only or none)", mode)
	}
	provider := NewProvider(cfg.Provider)
	defer provider.Close()
	s := NewSummarizer(provider.URL(), cfg.MaxTokens)
	docs := Documents(cfg.Docs, cfg.MinWords, cfg.MaxWords, cfg.Seed)
	// The starter counts each document's input tokens once, with the official client.
	if err := CountInputTokens(ctx, s.client, docs); err != nil {
		return Result{}, err
	}
	taskQueue := "anthropic-" + mode + "-" + randomHex(4)
	stopWorkers, err := startWorkers(cfg, mode, taskQueue, s, pool, q, c)
	if err != nil {
		return Result{}, err
	}
	defer stopWorkers()

	start := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskQueue, TaskQueue: taskQueue}, SummarizeAll, docs)
	if err != nil {
		return Result{}, err
	}
	stopProgress := reportProgress(cfg, mode, start, provider, s, progress)
	var completed int
	err = wr.Get(ctx, &completed)
	wall := time.Since(start)
	stopProgress()
	if err != nil {
		return Result{}, err
	}
	use := provider.Use()
	mean, largest := estimateError(s.estimateCounts())
	return Result{
		Mode:        mode,
		WallSeconds: round(wall.Seconds(), 1), BusySeconds: round(use.Busy.Seconds(), 1),
		RateLimited: provider.Stats().RateLimited, Retries: s.retries.Load(),
		RequestsShare: round(use.Requests.Pct(), 1), InputShare: round(use.Input.Pct(), 1), OutputShare: round(use.Output.Pct(), 1),
		EstimateErrorMean: round(mean, 2), EstimateErrorMax: round(largest, 2),
		Completed: completed, Docs: len(docs),
		use: use,
	}, nil
}

// reportProgress prints a progress line every cfg.Progress until the function it returns is called.
func reportProgress(cfg Config, mode string, start time.Time, p *Provider, s *Summarizer, w io.Writer) func() {
	if cfg.Progress <= 0 || w == nil {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cfg.Progress)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ps := p.Stats()
			otpm := p.OutputPerMinute(10 * time.Second)
			fmt.Fprintf(w, "%-10s %4.0fs  done %3d/%d  in flight %2d  output tokens/min (last 10s) %6.0f (%3.0f%% of OTPM)  429s %4d  retries %4d\n",
				mode, time.Since(start).Seconds(), s.completed.Load(), cfg.Docs, ps.Inflight, otpm, 100*otpm/cfg.Provider.OTPM,
				ps.RateLimited, s.retries.Load())
		}
	}()
	return func() { close(stop); <-done }
}
