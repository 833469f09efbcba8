// Package demoenv is what the samples' commands share: a Sluice schema of their own on a Postgres,
// a Temporal client that does not log every retried 429, and the rounding of their figures.
package demoenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	stdlog "log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/sluicehq/sluice/internal/temporaltest"
	"github.com/sluicehq/sluice/pgqueue"
)

// With runs fn with a pool on the Postgres at dbURL, a Sluice schema of its own named prefix and a
// random suffix (dropped at the end), and a client of the Temporal server at temporalAddr.
func With(ctx context.Context, dbURL, temporalAddr, prefix string, fn func(*pgxpool.Pool, *pgqueue.Queue, client.Client) error) error {
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 16)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema := prefix + RandomHex(4)
	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: schema}); err != nil {
		return err
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
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: QuietLogger{temporaltest.QuietLogger()}})
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(pool, q, c)
}

// QuietLogger is a logger without the SDK's "Activity error." line, which it logs for every 429 that
// Temporal retries: hundreds of them in a demo's mode without a throttle.
type QuietLogger struct{ log.Logger }

// Error logs msg unless it is the SDK's "Activity error.".
func (l QuietLogger) Error(msg string, keyvals ...any) {
	if msg != "Activity error." {
		l.Logger.Error(msg, keyvals...)
	}
}

// RandomHex is n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Round rounds v to places decimal places, half away from zero for v >= 0.
func Round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
