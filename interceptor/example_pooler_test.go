package interceptor_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// Behind PgBouncer in transaction mode (or a managed Postgres's pooler): the pool goes through the
// pooler with pgx's exec mode, so that no prepared statement outlives a transaction, and the
// listener goes straight to Postgres. Leave ListenURL out to keep every connection behind the
// pooler: the worker then polls every PollInterval (DefaultPooledPollInterval, 200 ms).
func ExampleOptions_transactionPooler() {
	ctx := context.Background()
	// e.g. postgres://app@pgbouncer:6432/app?default_query_exec_mode=exec
	cfg, err := pgxpool.ParseConfig(os.Getenv("PGBOUNCER_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 2 // a replica's budget: two pooled connections (plus the direct listener)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
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
		Pool:              pool,
		TransactionPooler: true,
		ListenURL:         os.Getenv("DATABASE_URL"), // direct to Postgres: one connection, LISTEN only
		Client:            c,
		Limits:            []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10}},
		Routes:            map[string]sluiceinterceptor.Route{"Summarize": {Limits: []string{"openai"}}},
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
