// Command quickstart runs a workflow that fans out 50 "CallAPI" activities against a service that
// allows 3 at a time and 10 requests per second, across two workers, with Sluice enforcing both
// limits globally. It prints the peak concurrency the activities saw and the admitted rate.
//
//	temporal server start-dev                # in another terminal: Temporal at localhost:7233
//	go run ./samples/quickstart              # against it and a local Postgres
//	go run ./samples/quickstart -temporal temporal.internal:7233 -database postgres://app@db/app
//
// It takes what any program with Sluice takes: a Temporal frontend, -temporal (default
// $TEMPORAL_ADDRESS, else localhost:7233), and a Postgres, -database (default $DATABASE_URL, else
// postgres://postgres@localhost:5432/postgres?sslmode=disable). Sluice's tables go in the schema
// -schema, created if missing.
//
// With -trace it prints Sluice's spans as they end: each activity's wait in the queue (and why it
// waited) and its run.
package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// defaultDatabaseURL is the Postgres of -database when DATABASE_URL is unset: a local one.
const defaultDatabaseURL = "postgres://postgres@localhost:5432/postgres?sslmode=disable"

// API stands for a rate-limited service; its counters are what the service would see.
type API struct{ inFlight, peak atomic.Int64 }

// CallAPI is an ordinary activity: nothing in it knows about Sluice.
func (a *API) CallAPI(ctx context.Context, n int) (int, error) {
	cur := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for p := a.peak.Load(); cur > p && !a.peak.CompareAndSwap(p, cur); p = a.peak.Load() {
	}
	time.Sleep(50 * time.Millisecond) // the call
	return n * n, nil
}

// FanOut calls the API n times at once and sums the answers.
func FanOut(ctx workflow.Context, n int) (int, error) {
	// StartToCloseTimeout covers the wait in Sluice's queue as well as the call.
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 5 * time.Minute})
	fs := make([]workflow.Future, n)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity(ctx, "CallAPI", i)
	}
	sum := 0
	for _, f := range fs {
		var v int
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// Result is what one run saw.
type Result struct {
	Sum, Peak int
	Elapsed   time.Duration
}

// printSpans is a span processor that prints Sluice's spans, for -trace.
type printSpans struct{ sdktrace.SpanProcessor }

func (printSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (printSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	line := fmt.Sprintf("%-12s %8s", s.Name(), s.EndTime().Sub(s.StartTime()).Round(time.Millisecond))
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case sluiceinterceptor.AttrTicketID, sluiceinterceptor.AttrWaitReason, sluiceinterceptor.AttrQueueDepth, sluiceinterceptor.AttrOutcome:
			line += fmt.Sprintf(" %s=%v", kv.Key, kv.Value.AsInterface())
		}
	}
	fmt.Println(line)
}
func (printSpans) Shutdown(context.Context) error   { return nil }
func (printSpans) ForceFlush(context.Context) error { return nil }

func run(ctx context.Context, dbURL string, pooler poolflags.Pooler, temporalAddr, schema string, n int, tp trace.TracerProvider) (Result, error) {
	pcfg, err := pooler.PoolConfig(dbURL)
	if err != nil {
		return Result{}, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return Result{}, fmt.Errorf("-database: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return Result{}, fmt.Errorf("connect to the Postgres of -database: %w", err)
	}
	// The SDK's errors only: its info lines would bury the result.
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	// A minute per call rather than the SDK's 10 s: a busy machine's dev server can be slower to start
	// the workflow than that, and the sample should wait, not fail.
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: logger, RPCTimeout: time.Minute})
	if err != nil {
		return Result{}, fmt.Errorf("connect to Temporal at -temporal %q: %w", temporalAddr, err)
	}
	defer c.Close()

	api := &API{}
	const taskQueue = "quickstart"
	for range 2 { // two workers, as two replicas would be
		plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
			Pool: pool, Client: c, Schema: schema, TracerProvider: tp,
			TransactionPooler: pooler.TransactionPooler, ListenURL: pooler.ListenURL,
			Limits: []throttle.Limit{{Key: "api", MaxConcurrent: 3, RequestsPerSecond: 10, Burst: 3}},
			Routes: map[string]sluiceinterceptor.Route{"CallAPI": {Limits: []string{"api"}}},
		})
		if err != nil {
			return Result{}, err
		}
		w := worker.New(c, taskQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 10 * time.Second})
		w.RegisterWorkflow(FanOut)
		w.RegisterActivity(api)
		if err := w.Start(); err != nil {
			return Result{}, err
		}
		defer w.Stop()
	}
	start := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: taskQueue}, FanOut, n)
	if err != nil {
		return Result{}, err
	}
	var sum int
	if err := wr.Get(ctx, &sum); err != nil {
		return Result{}, err
	}
	return Result{Sum: sum, Peak: int(api.peak.Load()), Elapsed: time.Since(start)}, nil
}

func main() {
	n := flag.Int("n", 50, "activities to fan out")
	schema := flag.String("schema", "sluice_quickstart", "Postgres schema for Sluice's tables")
	printTrace := flag.Bool("trace", false, "print Sluice's wait and run spans as they end")
	temporalAddr := flag.String("temporal", "", "the Temporal frontend, host:port (default $TEMPORAL_ADDRESS, else "+client.DefaultHostPort+")")
	// DATABASE_URL is read after parsing, not made the flag's default, so that -h does not print it.
	databaseURL := flag.String("database", "", "the Postgres URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	pooler, err := poolflags.Define(flag.CommandLine)
	if err != nil {
		log.Fatal(err)
	}
	flag.Parse()
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if *printTrace {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(printSpans{}))
	}
	addr := cmp.Or(*temporalAddr, os.Getenv("TEMPORAL_ADDRESS"), client.DefaultHostPort)
	db := cmp.Or(*databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
	res, err := run(context.Background(), db, pooler(), addr, *schema, *n, tp)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d calls in %s (%.1f/s; limit 10/s, burst 3), peak concurrency %d (limit 3), sum %d\n",
		*n, res.Elapsed.Round(time.Millisecond), float64(*n)/res.Elapsed.Seconds(), res.Peak, res.Sum)
}
