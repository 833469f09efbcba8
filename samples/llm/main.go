// Command llm is Sluice's main demo: a workflow summarises documents of varied length concurrently,
// one activity per document, through the official OpenAI Go client, against a local fake provider
// that enforces a tokens-per-minute and a requests-per-minute quota the way real providers do (429
// with Retry-After, x-ratelimit-* headers). It runs the same fan-out three times, each with a fresh
// provider and task queue and two workers:
//
//   - none: no throttle; Temporal retries the 429s.
//   - temporal: Temporal's TaskQueueActivitiesPerSecond set to the provider's request rate.
//   - sluice: the Sluice plugin, with the provider's request and token quotas as a limit.
//
// and prints, for each, the wall time, the tokens per minute achieved as a share of the quota, the
// 429s the provider sent, the Temporal retries and the documents summarised.
//
//	make demo                         # Postgres and a Temporal dev server are found or started
//	go run ./samples/llm -json        # one JSON object per run instead of the table
//	go run ./samples/llm -docs 60 -tpm 30000 -rpm 120 -modes sluice
//
// Postgres is DATABASE_URL, else TEST_DATABASE_URL, else a local one; Temporal is TEMPORAL_ADDRESS,
// else a dev server started from the temporal CLI named by SLUICE_TEMPORAL_CLI (make bin/temporal).
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

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
}

// DefaultConfig is the full demo: about a minute per mode.
func DefaultConfig() Config {
	return Config{
		Docs: 120, MinLen: 200, MaxLen: 8000, Seed: 42,
		TPM: 60_000, RPM: 300, MaxTokens: 256,
		Provider: ProviderConfig{BurstSeconds: 10, BaseLatency: 100 * time.Millisecond, PerToken: 2 * time.Millisecond},
		Modes:    []string{ModeNone, ModeTemporal, ModeSluice},
		Progress: 2 * time.Second, Window: 10 * time.Second,
	}
}

// ShortConfig is a tiny configuration, a few seconds per mode, for tests.
func ShortConfig() Config {
	c := DefaultConfig()
	c.Docs, c.MinLen, c.MaxLen = 12, 200, 2000
	c.TPM, c.RPM, c.MaxTokens = 12_000, 120, 128
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

// Result is what one mode achieved. The JSON field names are the -json output.
type Result struct {
	Mode string `json:"mode"`
	// WallSeconds is from the workflow's start to its result.
	WallSeconds float64 `json:"wall_seconds"`
	// QuotaShare is the tokens the provider accepted over the quota for the wall time:
	// tokens / (TPM x wall minutes).
	QuotaShare float64 `json:"quota_share"`
	// RateLimited counts the 429s the provider sent.
	RateLimited int64 `json:"rate_limited"`
	// Retries counts the Temporal activity attempts beyond the first.
	Retries int64 `json:"retries"`
	// Completed counts the documents summarised.
	Completed int `json:"completed"`
	// Tokens counts the tokens the provider accepted.
	Tokens int64 `json:"-"`
}

// quietLogger is temporaltest.QuietLogger without the SDK's "Activity error." line, which it logs
// for every 429 that Temporal retries: hundreds of them in the none mode.
type quietLogger struct{ log.Logger }

func (l quietLogger) Error(msg string, keyvals ...any) {
	if msg != "Activity error." {
		l.Logger.Error(msg, keyvals...)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runAll runs every mode of cfg against the Postgres at dbURL and the Temporal server at
// temporalAddr, in a schema of its own that it drops at the end, printing progress to progress.
// Each result is passed to done as soon as its run ends.
func runAll(ctx context.Context, cfg Config, dbURL, temporalAddr string, progress io.Writer, done func(Result)) ([]Result, error) {
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 16)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	schema := "sluice_demo_" + randomHex(4)
	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: schema}); err != nil {
		return nil, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			stdlog.Printf("drop schema %s: %v", schema, err)
		}
	}()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: schema})
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietLogger{temporaltest.QuietLogger()}})
	if err != nil {
		return nil, err
	}
	defer c.Close()

	docs := Documents(cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Seed)
	var out []Result
	for _, mode := range cfg.Modes {
		res, err := runMode(ctx, cfg, mode, docs, pool, q, c, progress)
		if err != nil {
			return out, fmt.Errorf("mode %s: %w", mode, err)
		}
		out = append(out, res)
		if done != nil {
			done(res)
		}
	}
	return out, nil
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
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress <= 0 || progress == nil {
			return
		}
		t := time.NewTicker(cfg.Progress)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
			}
			queued := "-"
			if mode == ModeSluice {
				if stats, err := q.Stats(ctx); err == nil {
					for _, s := range stats {
						if s.Key == "llm" {
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
		}
	}()
	var completed int
	err = wr.Get(ctx, &completed)
	wall := time.Since(start)
	close(stopProgress)
	<-progressDone
	if err != nil {
		return Result{}, err
	}
	ps := provider.Stats()
	return Result{
		Mode:        mode,
		WallSeconds: round(wall.Seconds(), 1),
		QuotaShare:  round(float64(ps.Tokens)/(cfg.TPM*wall.Minutes()), 3),
		RateLimited: ps.RateLimited,
		Retries:     llm.retries.Load(),
		Completed:   completed,
		Tokens:      ps.Tokens,
	}, nil
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// printTable prints the results side by side.
func printTable(w io.Writer, cfg Config, rs []Result) {
	fmt.Fprintf(w, "\n%d documents, quota %.0f tokens/min and %.0f requests/min, 2 workers per mode\n\n", cfg.Docs, cfg.TPM, cfg.RPM)
	fmt.Fprintf(w, "%-9s | %9s | %11s | %6s | %16s | %9s\n", "mode", "wall time", "quota share", "429s", "Temporal retries", "completed")
	fmt.Fprintf(w, "%s\n", strings.Repeat("-", 9+3+9+3+11+3+6+3+16+3+9))
	for _, r := range rs {
		fmt.Fprintf(w, "%-9s | %8.1fs | %10.1f%% | %6d | %16d | %9s\n", r.Mode, r.WallSeconds, 100*r.QuotaShare,
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
		fmt.Fprintf(w, "\nquota share = tokens accepted / (quota x wall time). The provider's token bucket starts full\n"+
			"(%.0fs worth), so with these %d tokens the best possible share is %.1f%%; with Sluice's smaller\n"+
			"token burst (%.0f tokens) it is %.1f%%.\n",
			cfg.Provider.BurstSeconds, tokens, 100*float64(tokens)/(float64(tokens)-burst),
			sluiceBurst, 100*float64(tokens)/(float64(tokens)-min(burst, sluiceBurst)))
	}
}

func main() { os.Exit(realMain()) }

// realMain is main, returning the exit code so that the deferred clean-ups run.
func realMain() int {
	cfg := DefaultConfig()
	short := flag.Bool("short", false, "a tiny quick configuration (12 documents, a small quota)")
	docs := flag.Int("docs", 0, "documents to summarise (default 120, -short 12)")
	tpm := flag.Float64("tpm", 0, "the provider's tokens-per-minute quota (default 60000, -short 12000)")
	rpm := flag.Float64("rpm", 0, "the provider's requests-per-minute quota (default 300, -short 120)")
	modes := flag.String("modes", strings.Join(cfg.Modes, ","), "modes to run, in order: none, temporal, sluice")
	asJSON := flag.Bool("json", false, "print one JSON object per run instead of the table")
	flag.Parse()
	if *short {
		cfg = ShortConfig()
	}
	cfg.Docs = cmp.Or(*docs, cfg.Docs)
	cfg.TPM = cmp.Or(*tpm, cfg.TPM)
	cfg.RPM = cmp.Or(*rpm, cfg.RPM)
	cfg.Modes = nil
	for m := range strings.SplitSeq(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Modes = append(cfg.Modes, m)
		}
	}
	if cfg.Docs < 1 || cfg.TPM <= 0 || cfg.RPM <= 0 || len(cfg.Modes) == 0 {
		stdlog.Print("-docs, -tpm and -rpm must be positive and -modes must name a mode")
		return 2
	}

	ctx := context.Background()
	addr := os.Getenv("TEMPORAL_ADDRESS")
	if addr == "" {
		path := os.Getenv("SLUICE_TEMPORAL_CLI")
		if path == "" {
			stdlog.Print("set TEMPORAL_ADDRESS to a Temporal server, or SLUICE_TEMPORAL_CLI to a temporal CLI (make bin/temporal)")
			return 1
		}
		dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{ExistingPath: path, LogLevel: "error",
			ClientOptions: &client.Options{Logger: temporaltest.QuietLogger()}, Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			stdlog.Print(err)
			return 1
		}
		defer func() { _ = dev.Stop() }()
		addr = dev.FrontendHostPort()
	}
	db := cmp.Or(os.Getenv("DATABASE_URL"), os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")

	var progress io.Writer = os.Stdout
	done := func(r Result) {
		fmt.Printf("%-8s finished: %d/%d documents in %.1fs, %.1f%% of the token quota, %d 429s, %d Temporal retries\n",
			r.Mode, r.Completed, cfg.Docs, r.WallSeconds, 100*r.QuotaShare, r.RateLimited, r.Retries)
	}
	if *asJSON {
		progress = os.Stderr // stdout carries only the JSON lines
		enc := json.NewEncoder(os.Stdout)
		done = func(r Result) { _ = enc.Encode(r) }
	}
	if !*asJSON {
		fmt.Printf("Summarising %d documents (%d-%d chars) against a fake provider allowing %.0f tokens/min and %.0f requests/min; modes %s\n",
			cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.TPM, cfg.RPM, strings.Join(cfg.Modes, ", "))
	}
	rs, err := runAll(ctx, cfg, db, addr, progress, done)
	if err != nil {
		stdlog.Print(err)
	}
	if !*asJSON && len(rs) > 0 {
		printTable(os.Stdout, cfg, rs)
	}
	if err != nil {
		return 1
	}
	return 0
}
