package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// Limits change at runtime, on every replica at its next admission, through the plugin's Queue (or
// pgqueue.New on the same schema, from any program).
func ExamplePlugin_Queue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool:   pool,
		Client: c,
		Limits: []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}},
		Routes: map[string]sluiceinterceptor.Route{"Summarize": {Limits: []string{"openai"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, "llm", worker.Options{Plugins: []worker.Plugin{plugin}})
	w.RegisterActivity(Summarize)
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()

	q := plugin.Queue()
	// The provider raised the account's quota. A worker that starts later upserts its Options.Limits
	// again, so change them too (or leave the key out of Options.Limits and manage it here only).
	err = q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 100, RequestsPerSecond: 20, TokensPerMinute: 200_000})
	if err != nil {
		log.Fatal(err)
	}
	// An incident at the provider: hold every replica's admissions for a minute, then lift it early.
	if err := q.Pause(ctx, "openai", time.Now().Add(time.Minute)); err != nil {
		log.Fatal(err)
	}
	if err := q.Resume(ctx, "openai"); err != nil {
		log.Fatal(err)
	}

	st, err := q.LimitStatus(ctx, "openai")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("openai: %v tokens a minute configured, %v applied, %d running\n",
		st.Configured.TokensPerMinute, st.Effective.TokensPerMinute, st.State.InflightCount)
}
