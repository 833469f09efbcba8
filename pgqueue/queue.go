package pgqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/throttle"
)

// DefaultSchema is the schema Sluice's tables live in when a schema is not given.
const DefaultSchema = "sluice"

// MaxCost is the largest token cost one ticket may reserve (2^40): a route's Cost must return a
// value in [0, MaxCost].
const MaxCost = int64(1) << 40

// ErrUnknownLimit is returned for a key that has no limit in the schema. Test with errors.Is.
var ErrUnknownLimit = engine.ErrUnknownLimit

// ValidateSchema reports whether name is usable as the schema Sluice's tables live in: a lower-case
// Postgres identifier (letters, digits, underscores) of at most 63 bytes. It is checked, not quoted
// into acceptance, so that a hostile name never reaches SQL.
func ValidateSchema(name string) error {
	if err := engine.ValidateSchema(name); err != nil {
		return fmt.Errorf("pgqueue: %w", err)
	}
	return nil
}

// DB is what both a *pgxpool.Pool and a pgx.Tx offer: Migrate runs on either.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Options configures a Queue. The zero value is usable.
type Options struct {
	// Schema holds Sluice's tables. Defaults to DefaultSchema.
	Schema string
}

// Queue administers Sluice's tables in one schema: the limits (read, change at runtime, pause and
// resume), and how the queue stands (Stats, Verify). The dispatcher's own operations (claims,
// completions, hand-backs) are not here: the plugin runs them. A Queue is safe for concurrent use;
// every change applies on every replica at its next admission. Create it with New after Migrate.
type Queue struct {
	e *engine.Queue
}

// New returns a Queue over pool. It does not touch the database: run Migrate first.
func New(pool *pgxpool.Pool, opts Options) (*Queue, error) {
	if pool == nil {
		return nil, errors.New("pgqueue: pool must not be nil")
	}
	opts.Schema = cmp.Or(opts.Schema, DefaultSchema)
	if err := ValidateSchema(opts.Schema); err != nil {
		return nil, err
	}
	e, err := engine.New(pool, engine.Options{Schema: opts.Schema})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: %w", err)
	}
	return &Queue{e: e}, nil
}

// Schema returns the schema the queue's tables live in.
func (q *Queue) Schema() string { return q.e.Schema() }

// UpsertLimits creates the limits, or replaces the configuration of those that exist, keeping their
// admission state (buckets, in-flight figures, pauses). Each limit is validated first; nothing is
// written if one is invalid. The change applies at the next admission on every replica.
func (q *Queue) UpsertLimits(ctx context.Context, limits ...throttle.Limit) error {
	return q.e.UpsertLimits(ctx, limits...)
}

// UpsertLimitsTx is UpsertLimits inside the caller's transaction: the change applies when it commits.
func (q *Queue) UpsertLimitsTx(ctx context.Context, tx pgx.Tx, limits ...throttle.Limit) error {
	return q.e.UpsertLimitsTx(ctx, tx, limits...)
}

// Limit returns key's configuration as set by UpsertLimits or SQL, with defaults filled in. An
// unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) Limit(ctx context.Context, key string) (throttle.Limit, error) {
	return q.e.Limit(ctx, key)
}

// LimitStatus is a limit as configured and as admission applies it now.
type LimitStatus struct {
	// Configured is the limit as set by UpsertLimits or SQL; Effective is it lowered to what the
	// provider's headers taught (sluiceactivity.ReportHeaders).
	Configured, Effective throttle.Limit
	// State is the admission state: buckets, in-flight figures, the pause.
	State throttle.State
}

// LimitStatus returns key's configured and effective limit and its admission state. An unknown key
// returns an error wrapping ErrUnknownLimit.
func (q *Queue) LimitStatus(ctx context.Context, key string) (LimitStatus, error) {
	st, err := q.e.LimitStatus(ctx, key)
	return LimitStatus(st), err
}

// Pause stops admissions on key until until, on every replica; a later pause already in force is
// kept. Running activities go on. It is what a provider's 429 with a Retry-After turns into.
func (q *Queue) Pause(ctx context.Context, key string, until time.Time) error {
	return q.e.Pause(ctx, key, until)
}

// Resume lifts key's pause at once, on every replica, whatever set it.
func (q *Queue) Resume(ctx context.Context, key string) error {
	return q.e.Resume(ctx, key)
}

// KeyStats is how one limit stands.
type KeyStats struct {
	Key string
	// Queued counts tickets waiting in this key's line (the first limit of their route);
	// QueuedDrawing those waiting in any line that draw on the key.
	Queued, QueuedDrawing int64
	// Admitted counts tickets holding the key (admitted or running), from the tickets themselves.
	Admitted int64
	// InflightCount and InflightTokens are the limit row's own figures, which admission reads.
	InflightCount  int64
	InflightTokens int64
	// PausedUntil is the end of the key's pause; zero when it is not paused.
	PausedUntil time.Time
}

// Stats returns every limit's figures, in key order.
func (q *Queue) Stats(ctx context.Context) ([]KeyStats, error) {
	st, err := q.e.Stats(ctx)
	out := make([]KeyStats, len(st))
	for i, s := range st {
		out[i] = KeyStats(s)
	}
	return out, err
}

// Verify checks the tables' invariants and returns a description of each violation (none when
// healthy): every limit's in-flight figures equal the sum over the tickets holding it, no limit holds
// more than MaxConcurrent or MaxInflightTokens (an oversize ticket alone excepted), and no queued
// ticket waits in the line of a limit that does not exist. It locks nothing and changes nothing.
func (q *Queue) Verify(ctx context.Context) ([]string, error) {
	return q.e.Verify(ctx)
}
