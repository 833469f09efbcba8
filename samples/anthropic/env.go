package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/demoenv"
	"github.com/sluicehq/sluice/pgqueue"
)

// withEnv runs fn with a pool on the Postgres at dbURL, a Sluice schema of its own (dropped at the
// end) and a client of the Temporal server at temporalAddr (demoenv.With).
func withEnv(ctx context.Context, dbURL, temporalAddr string, fn func(*pgxpool.Pool, *pgqueue.Queue, client.Client) error) error {
	return demoenv.With(ctx, dbURL, temporalAddr, "sluice_anthropic_", fn)
}

func randomHex(n int) string { return demoenv.RandomHex(n) }

func round(v float64, places int) float64 { return demoenv.Round(v, places) }
