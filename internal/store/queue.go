package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the schema Sluice's tables live in when Options.Schema is empty.
const DefaultSchema = "sluice"

// NotifyChannel is the one LISTEN/NOTIFY channel Sluice uses; payloads carry the schema, so several
// schemas can share a database.
const NotifyChannel = "sluice"

var (
	// ErrNotFound is returned when a ticket is not in the state the operation needs (it finished, was
	// handed back, or belongs to another owner).
	ErrNotFound = errors.New("sluice: ticket not found")
	// ErrUnknownLimit is returned by Enqueue for a ticket that draws on a limit that was never upserted.
	ErrUnknownLimit = errors.New("sluice: unknown limit")
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// ValidateSchema reports whether name is usable as the schema Sluice's tables live in: a lower-case
// Postgres identifier (letters, digits, underscores) of at most 63 bytes. It is checked, not quoted
// into acceptance, so that a hostile name never reaches SQL. New, Migrate and the plugin's options
// call it.
func ValidateSchema(name string) error {
	if len(name) > 63 || !schemaRE.MatchString(name) {
		return fmt.Errorf("pgqueue: Schema must match %s and be at most 63 bytes, got %q", schemaRE, name)
	}
	return nil
}

// Options configures a Queue. The zero value is usable.
type Options struct {
	// Schema holds Sluice's tables. Defaults to DefaultSchema.
	Schema string
	// Now, when set, replaces the database clock in every statement. For tests; production uses the
	// database's clock_timestamp(), the one clock every replica shares. Defaults to nil.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	o.Schema = cmp.Or(o.Schema, DefaultSchema)
	return o
}

func (o Options) validate() error {
	return ValidateSchema(o.Schema)
}

// Queue is Sluice's store in one Postgres schema: the administration and the read model operators
// use (UpsertLimits, ChangeLimit, Pause, Status, Overview, Tickets, Verify: what most programs
// want), and the statements the plugin's dispatcher runs (enqueue, claim, take, complete, requeue,
// hand-back, deliveries, leases). It is safe for concurrent use by many goroutines and, through
// Postgres, by many processes. Create it with New after Migrate, or take the plugin's
// (interceptor.Plugin.Queue).
type Queue struct {
	pool   *pgxpool.Pool
	opts   Options
	schema string // quoted
	// cursor is the line this Queue's last claim stopped at: the next reads on from it.
	cursor atomic.Pointer[string]
}

func (q *Queue) lineCursor() string {
	if p := q.cursor.Load(); p != nil {
		return *p
	}
	return ""
}

func (q *Queue) setLineCursor(line string) { q.cursor.Store(&line) }

// New returns a Queue over pool. It does not touch the database: run Migrate first.
func New(pool *pgxpool.Pool, opts Options) (*Queue, error) {
	if pool == nil {
		return nil, errors.New("sluice: pool must not be nil")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	q := &Queue{pool: pool, opts: opts, schema: pgx.Identifier{opts.Schema}.Sanitize()}
	return q, nil
}

// Schema returns the schema the queue's tables live in.
func (q *Queue) Schema() string { return q.opts.Schema }

// Pool returns the pool the queue was created with.
func (q *Queue) Pool() *pgxpool.Pool { return q.pool }

// s qualifies every "sluice_" table name in stmt with the queue's schema.
func (q *Queue) s(stmt string) string {
	return strings.ReplaceAll(stmt, "{s}.", q.schema+".")
}

// nowArg is the argument for "coalesce($n::timestamptz, clock_timestamp())": nil for the database clock.
func (q *Queue) nowArg() any {
	if q.opts.Now == nil {
		return nil
	}
	return q.opts.Now()
}

// now is the instant of a decision: the injected clock, or the database's.
func (q *Queue) now(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	if q.opts.Now != nil {
		return q.opts.Now(), nil
	}
	var now time.Time
	err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now.UTC(), err
}

// DB is what both a *pgxpool.Pool and a pgx.Tx offer: Migrate runs on either.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction on db (a savepoint when db is already a transaction).
func InTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	// The commit is not cancelled with ctx: a COMMIT interrupted by the caller's cancellation may
	// have committed on the server while the caller hears an error, and the callers act on the
	// answer (a completion answered as failed must not have been recorded). It is bounded instead.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	return commitError(tx.Commit(cctx))
}

// ErrCommitUnknown marks an error heard after a COMMIT was sent, other than the server's answer to
// it (the connection broke, or the answer did not arrive in time): the transaction may have
// committed. A caller that acts on the answer must not take it for a rollback; the dispatcher's
// self-check reconciles what such a commit changed.
var ErrCommitUnknown = errors.New("the commit's outcome is unknown")

// commitError classifies err, heard while a COMMIT was under way: the server's answer (an error it
// raised, a rollback) is certain; anything else wraps ErrCommitUnknown.
func commitError(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
}

// commitTimeout bounds a COMMIT, which InTx does not let its caller's cancellation interrupt.
const commitTimeout = 30 * time.Second

// notify sends one notification inside tx, delivered at its commit.
func (q *Queue) notify(ctx context.Context, tx DB, kind, arg string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, q.opts.Schema+"|"+kind+"|"+arg)
	return err
}
