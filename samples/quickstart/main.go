// Command quickstart runs a workflow that fans out 50 "CallAPI" activities against a service that
// allows 3 at a time and 10 requests per second, across two workers, with Sluice enforcing both
// limits globally. It prints the peak concurrency the activities saw and the admitted rate.
//
//	go run ./samples/quickstart            # Postgres at DATABASE_URL, Temporal at TEMPORAL_ADDRESS
//
// With -trace it prints Sluice's spans as they end: each activity's wait in the queue (and why it
// waited) and its run.
//
// When TEMPORAL_ADDRESS is unset and SLUICE_TEMPORAL_CLI names a temporal CLI (make test builds one
// into bin/), it starts a dev server of its own.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/throttle"
)

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

func run(ctx context.Context, dbURL, temporalAddr, schema string, n int, tp trace.TracerProvider) (Result, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: temporaltest.QuietLogger()})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()

	api := &API{}
	const taskQueue = "quickstart"
	for range 2 { // two workers, as two replicas would be
		plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
			Pool: pool, Client: c, Schema: schema, TracerProvider: tp,
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
	flag.Parse()
	var tp trace.TracerProvider = noop.NewTracerProvider()
	if *printTrace {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(printSpans{}))
	}
	ctx := context.Background()
	addr := os.Getenv("TEMPORAL_ADDRESS")
	if addr == "" {
		path := os.Getenv("SLUICE_TEMPORAL_CLI")
		if path == "" {
			log.Fatal("set TEMPORAL_ADDRESS to a Temporal server, or SLUICE_TEMPORAL_CLI to a temporal CLI (make bin/temporal)")
		}
		dev, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{ExistingPath: path, LogLevel: "error",
			ClientOptions: &client.Options{Logger: temporaltest.QuietLogger()}, Stdout: io.Discard})
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = dev.Stop() }()
		addr = dev.FrontendHostPort()
	}
	db := cmp.Or(os.Getenv("DATABASE_URL"), os.Getenv("TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	res, err := run(ctx, db, addr, *schema, *n, tp)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d calls in %s (%.1f/s; limit 10/s, burst 3), peak concurrency %d (limit 3), sum %d\n",
		*n, res.Elapsed.Round(time.Millisecond), float64(*n)/res.Elapsed.Seconds(), res.Peak, res.Sum)
}
