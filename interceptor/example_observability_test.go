package interceptor_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uber-go/tally/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/opentelemetry"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// Sluice's metrics go through the Temporal client's metrics handler, and its spans (sluice.wait,
// sluice.run) are children of the activity's span when Temporal's OpenTelemetry interceptor is on the
// client.
func ExampleOptions_observability() {
	ctx := context.Background()
	// Add your tally reporter (Prometheus, StatsD) to the scope options, and your exporter to the
	// tracer provider (sdktrace.WithBatcher).
	scope, closer := tally.NewRootScope(tally.ScopeOptions{Prefix: "llm_worker"}, time.Second)
	defer closer.Close()
	metrics := sdktally.NewMetricsHandler(scope)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()

	tracing, err := opentelemetry.NewTracingInterceptor(opentelemetry.TracerOptions{Tracer: tp.Tracer("llm_worker")})
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{
		HostPort:       os.Getenv("TEMPORAL_ADDRESS"),
		MetricsHandler: metrics,
		Interceptors:   []interceptor.ClientInterceptor{tracing},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool:           pool,
		Client:         c,
		Limits:         []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}},
		Routes:         map[string]sluiceinterceptor.Route{"Summarize": {Limits: []string{"openai"}}},
		MetricsHandler: metrics, // the client's handler: sluice_* metrics go where Temporal's go
		TracerProvider: tp,      // defaults to otel.GetTracerProvider()
	})
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, "llm", worker.Options{Plugins: []worker.Plugin{plugin}})
	w.RegisterActivity(Summarize)
	if err := w.Run(worker.InterruptCh()); err != nil {
		log.Fatal(err)
	}
}
