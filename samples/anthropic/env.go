package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	stdlog "log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/sluicehq/sluice/pgqueue"
)

// defaultDatabaseURL is the Postgres of -database when DATABASE_URL is unset: a local one.
const defaultDatabaseURL = "postgres://postgres@localhost:5432/postgres?sslmode=disable"

// withEnv runs fn with a pool on the Postgres at dbURL, a Sluice schema of its own named
// sluice_anthropic_ and a random suffix (dropped at the end), and a client of the Temporal server at
// temporalAddr.
func withEnv(ctx context.Context, dbURL string, pooler poolflags.Pooler, temporalAddr string, fn func(*pgxpool.Pool, *pgqueue.Queue, client.Client) error) error {
	pcfg, err := pooler.PoolConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 16)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("-database: %w", err)
	}
	defer pool.Close()
	schema := "sluice_anthropic_" + randomHex(4)
	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: schema}); err != nil {
		return fmt.Errorf("create the schema %s on the Postgres of -database: %w", schema, err)
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
		return err
	}
	// The SDK's errors only, less the retried 429s (quietLogger): its info lines would bury the progress.
	sdkLogger := log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	// A minute per call rather than the SDK's 10 s: a busy machine's dev server can be slower to start
	// the workflow than that, and the sample should wait, not fail.
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: quietLogger{sdkLogger}, RPCTimeout: time.Minute})
	if err != nil {
		return fmt.Errorf("connect to Temporal at -temporal %q: %w", temporalAddr, err)
	}
	defer c.Close()
	return fn(pool, q, c)
}

// quietLogger is a logger without the SDK's "Activity error." line, which it logs for every 429 that
// Temporal retries: hundreds of them in a mode without a throttle.
type quietLogger struct{ log.Logger }

// Error logs msg unless it is the SDK's "Activity error.".
func (l quietLogger) Error(msg string, keyvals ...any) {
	if msg != "Activity error." {
		l.Logger.Error(msg, keyvals...)
	}
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// round rounds v to places decimal places, half away from zero for v >= 0.
func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
