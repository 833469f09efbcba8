package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sluicehq/sluice/internal/store"
)

// counter counts the statements and transactions a pool sends, alone or pipelined in a batch.
type counter struct{ statements, transactions atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *counter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		c.count(q.SQL)
	}
	return ctx
}

func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *counter) count(sql string) {
	c.statements.Add(1)
	if strings.EqualFold(strings.TrimSpace(sql), "begin") {
		c.transactions.Add(1)
	}
}

func (c *counter) reset() { c.statements.Store(0); c.transactions.Store(0) }

// env is the database under measurement: one pool for Sluice and one for River, each counted.
type env struct {
	url               string
	pool              *pgxpool.Pool // Sluice's
	riverPool         *pgxpool.Pool
	count, riverCount *counter
	schemas           []string
}

func newEnv(ctx context.Context, url string) (*env, error) {
	e := &env{url: url, count: &counter{}, riverCount: &counter{}}
	var err error
	if e.pool, err = newPool(ctx, url, e.count); err != nil {
		return nil, err
	}
	if e.riverPool, err = newPool(ctx, url, e.riverCount); err != nil {
		e.pool.Close()
		return nil, err
	}
	return e, nil
}

func newPool(ctx context.Context, url string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s: %w", redact(url), err)
	}
	return pool, nil
}

func redact(url string) string {
	if c, err := pgx.ParseConfig(url); err == nil {
		return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
	}
	return "(unparsable URL)"
}

func (e *env) close() {
	ctx := context.Background()
	for _, s := range e.schemas {
		_, _ = e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s}.Sanitize()+` CASCADE`)
	}
	e.pool.Close()
	e.riverPool.Close()
}

func newSchemaName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// sluiceQueue returns Sluice's engine over a fresh migrated schema.
func (e *env) sluiceQueue(ctx context.Context) (*store.Queue, error) {
	schema := newSchemaName("sluice_bench_")
	e.schemas = append(e.schemas, schema)
	if _, err := store.Migrate(ctx, e.pool, store.MigrateOptions{Schema: schema}); err != nil {
		return nil, err
	}
	return store.New(e.pool, store.Options{Schema: schema})
}

// riverSchema returns a fresh schema with River's tables.
func (e *env) riverSchema(ctx context.Context) (string, error) {
	schema := newSchemaName("river_bench_")
	e.schemas = append(e.schemas, schema)
	if _, err := e.riverPool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", err
	}
	m, err := rivermigrate.New(riverpgxv5.New(e.riverPool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return "", err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return schema, err
}

// dropSchema drops a schema made by sluiceQueue or riverSchema once its figure is taken.
func (e *env) dropSchema(ctx context.Context, schema string) {
	_, _ = e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err == nil {
		_, _ = fmt.Sscan(string(b), &l[0], &l[1], &l[2])
	}
	return l
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	Postgres  string `json:"postgres"`
}

func machine() Machine { return Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()} }
