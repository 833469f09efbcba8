package interceptor_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// Summarize stands for an activity that calls an LLM. Nothing in it needs to know about Sluice (see
// the activity package for what it may tell Sluice about the provider's answer).
func Summarize(ctx context.Context, doc string) (string, error) {
	return doc[:min(len(doc), 80)], ctx.Err()
}

// SummarizeAll summarises every document at once, one activity each: Sluice admits them within the
// provider's limits, globally across the workers.
func SummarizeAll(ctx workflow.Context, docs []string) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, // covers the wait in Sluice's queue as well as the call
		HeartbeatTimeout:    30 * time.Second, // Sluice heartbeats queued tickets
	})
	fs := make([]workflow.Future, len(docs))
	for i, doc := range docs {
		fs[i] = workflow.ExecuteActivity(ctx, Summarize, doc)
	}
	summaries := make([]string, len(docs))
	for i, f := range fs {
		if err := f.Get(ctx, &summaries[i]); err != nil {
			return nil, err
		}
	}
	return summaries, nil
}

func runWorker(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		return err
	}
	defer c.Close()

	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool:   pool, // the *pgxpool.Pool you already have
		Client: c,    // the worker's Temporal client
		Limits: []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}},
		Routes: map[string]sluiceinterceptor.Route{
			"Summarize": {Limits: []string{"openai"}, Cost: func(args []any) (int64, error) {
				return int64(len(args[0].(string))/4 + 500), nil // prompt estimate + max_tokens
			}},
		},
	})
	if err != nil {
		return err
	}
	w := worker.New(c, "llm", worker.Options{Plugins: []worker.Plugin{plugin}})
	w.RegisterWorkflow(SummarizeAll)
	w.RegisterActivity(Summarize)
	return w.Run(worker.InterruptCh()) // migrates the schema and upserts the limits, then polls
}

// A worker whose "Summarize" activities are admitted within an LLM provider's limits, shared by every
// replica that runs this program against the same Postgres.
func ExampleNewPlugin() {
	if err := runWorker(context.Background()); err != nil {
		log.Fatal(err)
	}
}
