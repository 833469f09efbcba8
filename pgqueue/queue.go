package pgqueue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// Queue administers Sluice's tables and reads them: limits, pauses, status, waiting lines,
// explanations, history and the overview. Every change applies at the next admission on every
// replica, and every read sees what all replicas see. The dispatcher's own protocol (enqueue, claim,
// complete, hand back) is not part of it: the plugin runs that. Create one with New, or take the
// plugin's (interceptor's Plugin.Queue). It is safe for concurrent use.
type Queue struct {
	s *store.Queue
}

// Options configures a Queue. Its fields, each documented with its default, are those of the engine
// the plugin runs, so a Queue reads the same tables the plugin writes.
type Options = store.Options

// New returns a Queue over pool, on the tables of opts.Schema (created by Migrate). It returns an error
// naming the field when opts is not valid, and when pool is nil.
func New(pool *pgxpool.Pool, opts Options) (*Queue, error) {
	s, err := store.New(pool, opts)
	if err != nil {
		return nil, err
	}
	return &Queue{s: s}, nil
}

// Schema is the schema that holds the Queue's tables.
func (q *Queue) Schema() string { return q.s.Schema() }

// Errors the Queue's methods return, for errors.Is.
var (
	// ErrNotFound: no ticket has that ID (finished tickets are pruned once delivered).
	ErrNotFound = store.ErrNotFound
	// ErrUnknownLimit: no limit has that key.
	ErrUnknownLimit = store.ErrUnknownLimit
	// ErrInvalidLimit: a change would leave a limit that throttle.Limit.Validate refuses.
	ErrInvalidLimit = store.ErrInvalidLimit
	// ErrLimitInUse: DeleteLimit was asked to delete a key that unfinished tickets name.
	ErrLimitInUse = store.ErrLimitInUse
)

// DefaultSchema is the schema Sluice's tables are in when Options.Schema and MigrateOptions.Schema
// are empty.
const DefaultSchema = store.DefaultSchema

// WithChangedBy returns ctx carrying who makes the limit changes done with it (an operator's name, a
// program's), recorded in the limit history. Without it a change is recorded as the program's.
func WithChangedBy(ctx context.Context, who string) context.Context {
	return store.WithChangedBy(ctx, who)
}

// UpsertLimits creates the limits or, for keys that exist, replaces their configuration. The admission
// state (buckets, in-flight figures, pauses) of an existing key is kept, so a worker restarting with
// the same limits loses nothing and a changed limit applies at the next admission on every replica.
// Each limit is validated (after its defaults are filled in) before anything is written. Each key
// created or changed is recorded in the limit history (LimitHistory) as made by who ctx names
// (WithChangedBy), else by the program; an upsert that changes nothing records nothing.
func (q *Queue) UpsertLimits(ctx context.Context, limits ...throttle.Limit) error {
	return q.s.UpsertLimits(ctx, limits...)
}

// UpsertLimitsTx is UpsertLimits inside tx (or on the pool when tx is nil). Who ctx names is set for
// the rest of tx: the history records it for the limits tx changes afterwards, in SQL too.
func (q *Queue) UpsertLimitsTx(ctx context.Context, tx pgx.Tx, limits ...throttle.Limit) error {
	return q.s.UpsertLimitsTx(ctx, tx, limits...)
}

// EnsureLimits creates those of limits whose keys do not exist yet and leaves existing ones alone,
// configuration included, so that a limit changed at runtime keeps its change. It is how limits on
// keys derived at run time (one per tenant) come into being. Each limit is validated first. The keys
// it creates are recorded in the limit history as created by who ctx names (WithChangedBy), else by
// the program.
func (q *Queue) EnsureLimits(ctx context.Context, limits ...throttle.Limit) error {
	return q.s.EnsureLimits(ctx, limits...)
}

// Limit returns the current configuration of key, with defaults filled in.
func (q *Queue) Limit(ctx context.Context, key string) (throttle.Limit, error) {
	return q.s.Limit(ctx, key)
}

// ChangeLimit applies c to key's configuration (throttle.LimitChange.Apply: a rate changed without
// its burst gets its default burst back) under the limit row's lock, so that two changes at
// the same moment (two operators, the dashboard and the sluice command) both apply, and returns the
// limit stored. The result is validated first: an invalid one returns an error wrapping
// ErrInvalidLimit that names the field and value, and changes nothing; so does an OnSpent given for a
// limit left without allowances, which it would not change. An unknown key is created
// from the zero Limit when create is set, and is otherwise an error wrapping ErrUnknownLimit. Like
// UpsertLimits, it applies at the next admission on every replica, and the change is recorded in the
// limit history (LimitHistory) as made by who ctx names (WithChangedBy), else by the program.
func (q *Queue) ChangeLimit(ctx context.Context, key string, c throttle.LimitChange, create bool) (throttle.Limit, error) {
	return q.s.ChangeLimit(ctx, key, c, create)
}

// DeleteLimit deletes the limit key with what is kept under its key: its fair-share tags, its pending
// releases and allowance ledger rows, its usage and run-time history, and the returned tickets that
// keep a retry's place in its line. The limit history keeps the deletion (ChangeDeleted, with the
// configuration it had) as made by who ctx names (WithChangedBy), else by the program, and the
// earlier records of the key, until Prune's retention.
//
// A key that unfinished tickets (queued, admitted or running) name, as their line or as another of
// their limits, is not deleted: the error wraps ErrLimitInUse and says how many, and nothing changes.
// An unknown key is an error wrapping ErrUnknownLimit. Once deleted, an Enqueue naming the key fails
// with ErrUnknownLimit until it is created again (UpsertLimits, ChangeLimit with create), which
// starts it afresh.
//
// It is safe against concurrent enqueues: Enqueue locks the limit rows it names (FOR KEY SHARE) until
// its transaction ends, and DeleteLimit locks the row FOR UPDATE before it counts the tickets, so a
// ticket is either counted or refused, never written for a deleted key. Claims and enqueues do not
// wait for each other; DeleteLimit waits for the transactions that enqueue on, claim or change the
// key (an EnqueueTx inside a long transaction holds it up until that commits).
func (q *Queue) DeleteLimit(ctx context.Context, key string) error {
	return q.s.DeleteLimit(ctx, key)
}

// DeleteLimitTx is DeleteLimit inside tx (or on the pool when tx is nil): the limit is gone when, and
// only when, tx commits, and its row stays locked until then. Who ctx names is set for the rest of tx,
// as UpsertLimitsTx does.
func (q *Queue) DeleteLimitTx(ctx context.Context, tx pgx.Tx, key string) error {
	return q.s.DeleteLimitTx(ctx, tx, key)
}

// Pause stops admissions on key until until, on every replica; a later pause already in force is kept
// (throttle's State.Pause, in SQL so that the update needs no read first; TestQueue_PauseMatchesThrottle
// checks the two agree). It is what a provider's 429 with a Retry-After turns into.
func (q *Queue) Pause(ctx context.Context, key string, until time.Time) error {
	return q.s.Pause(ctx, key, until)
}

// SetPause sets key's pause to exactly until, on every replica: an operator's pause, which shortens
// a pause in force (a provider's 429 included) as readily as it extends it, where Pause keeps the
// later of the two. An until not after now (the queue's clock) lifts the pause, as Resume does. Either
// way it wakes the claimers, so that a pause shortened or lifted lets the work it held in at once.
// The sluice command's pause and the dashboard's call it; the plugin's 429 path calls Pause, so that
// one provider's pause is never shortened by another's. An unknown key is an error wrapping
// ErrUnknownLimit. It is safe for concurrent use.
func (q *Queue) SetPause(ctx context.Context, key string, until time.Time) error {
	return q.s.SetPause(ctx, key, until)
}

// Resume lifts key's pause at once, on every replica, whatever set it (Pause, or a provider's 429).
func (q *Queue) Resume(ctx context.Context, key string) error {
	return q.s.Resume(ctx, key)
}

// Status returns the status of keys, in key order, or of every limit when keys is empty. A key that
// does not exist returns an error wrapping ErrUnknownLimit that names it, with the status of the keys
// that do exist. At thousands of keys, StatusPage reads those of a prefix, a page at a time.
func (q *Queue) Status(ctx context.Context, keys ...string) ([]KeyStatus, error) {
	return q.s.Status(ctx, keys...)
}

// StatusPage returns the status of the first p.Limit keys that start with p.Prefix, in key order, and
// how many keys start with it. The prefix is a byte-wise range that the key prefix index (migration 8)
// serves, and only the page's keys get their figures read: its cost grows with the page and with the
// keys of the prefix, not with the keys of the schema. Status reads keys by name.
func (q *Queue) StatusPage(ctx context.Context, p StatusParams) (StatusPage, error) {
	return q.s.StatusPage(ctx, p)
}

// LimitStatus returns key's configured and effective limit and its admission state: the light read
// of Status, which reads the limit's row and its pending releases and counts no tickets, for what
// reads often (the plugin's gauges). An unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) LimitStatus(ctx context.Context, key string) (LimitStatus, error) {
	return q.s.LimitStatus(ctx, key)
}

// Usage returns, for each of keys, what it admitted per step over the window before the database's
// clock, oldest first, every step present (zero when nothing was admitted), and that clock. The steps
// are aligned to multiples of step since the Unix epoch; the last one is still filling. The table
// keeps an hour of history.
func (q *Queue) Usage(ctx context.Context, keys []string, window, step time.Duration) (map[string][]UsagePoint, time.Time, error) {
	return q.s.Usage(ctx, keys, window, step)
}

// Overview returns one page of the keys that start with p.Prefix, in p's order, with their queued
// tickets, oldest wait and use of their limits, and how many keys match; in one statement that locks
// nothing. Its cost grows with the matching keys, not with the keys of the schema.
func (q *Queue) Overview(ctx context.Context, p OverviewParams) (Overview, error) {
	return q.s.Overview(ctx, p)
}

// Ticket returns ticket id in whatever state it is.
func (q *Queue) Ticket(ctx context.Context, id int64) (Ticket, error) {
	return q.s.Ticket(ctx, id)
}

// Tickets returns up to max of the tickets that draw on key, from any line, and the database's
// clock: first those queued, in the order Explain counts tickets ahead (priority, fair-share start
// tag, arrival), each with its place and what holds it; then those running and admitted on it.
// Finding the queued tickets drawing on a key other than their line's reads every queued ticket. An
// unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) Tickets(ctx context.Context, key string, max int) ([]KeyTicket, time.Time, error) {
	return q.s.Tickets(ctx, key, max)
}

// FindTickets returns the tickets of the workflow (and activity) of tq, in any state, newest first:
// how an operator who sees a slow activity in Temporal's UI finds its ticket. A ticket is kept until
// its outcome is delivered, so a finished activity's ticket is soon gone. It reads every ticket: an
// operator's read, not one for a hot path.
func (q *Queue) FindTickets(ctx context.Context, tq TicketQuery) ([]Ticket, error) {
	return q.s.FindTickets(ctx, tq)
}

// Explain returns ticket id and, when it is queued, why it waits and when it is expected to be
// admitted: the engine's explanation over the ticket's limits as the next claim will see them (pending
// releases folded in) and what stands on each, read in one snapshot that locks nothing:
//
//   - ahead on a limit are the queued tickets drawing on it (in any line) that sort before the ticket
//     by priority, fair-share start tag and arrival (on its line's limit, its line's order), and
//     that no other of their limits holds back now: a ticket ahead that a full tenant holds is not
//     admitted first on this limit's account. Those beyond the 2,000 read are taken to be held
//     back in the same share;
//   - run times are measured: how long the limit's runs that ended in the last hour held it, from
//     admission to completion (sluice_run_time, the newest 200); the typical run is their median,
//     its likely range their quartiles. Not known when no run ended in the hour;
//   - a ticket holding a limit (admitted or running) is expected to release it after the time still
//     to go of the recent runs that lasted longer than it has so far, and by its deadline at the
//     latest; one that has run longer than every recent run is overdue: expected by its deadline,
//     or, with none, never counted on (throttle.LimitWait.Overdue);
//   - UsedShare, the share of a reservation a run is expected to use (a release gives the rest back
//     to the token buckets), is the tokens the limit drew over the trailing window of its usage
//     history that holds its last 20 admissions (at most an hour), net of the refunds of reported
//     usage, over those tokens and the refunds; UsedShareOutput the same of the output tokens alone,
//     when output was reserved in that window.
//
// Finding the tickets ahead on a limit other than the line's reads every queued ticket: it is an
// operator's read, not one for a hot path. An unknown id returns an error wrapping ErrNotFound.
func (q *Queue) Explain(ctx context.Context, id int64) (TicketExplanation, error) {
	return q.s.Explain(ctx, id)
}

// LimitHistory returns the last max recorded changes of key at or after since (the zero time: all the
// history kept, LimitHistoryRetention), oldest first. A key with no history returns an empty slice if
// the limit exists and an error wrapping ErrUnknownLimit otherwise; a deleted key keeps its history.
// max must be from 1 to MaxLimitHistory. In SQL:
//
//	SELECT at, kind, who, before, after FROM sluice.sluice_limit_change WHERE key = 'openai' ORDER BY at, id;
func (q *Queue) LimitHistory(ctx context.Context, key string, since time.Time, max int) ([]LimitRecord, error) {
	return q.s.LimitHistory(ctx, key, since, max)
}

// LimitSteps returns, for each of keys, the limit as it stood over time since since, oldest first:
// a step at since, then one at each recorded change (LimitHistory) after it, up to the last 1,000. It
// is what a chart of the key's use draws its limit from, so that yesterday's higher rate does not read
// as a breach of today's. The steps are worked back from the limit's row as it stands, read with its
// history in one snapshot; a key that does not exist has no steps.
func (q *Queue) LimitSteps(ctx context.Context, keys []string, since time.Time) (map[string][]LimitStep, error) {
	return q.s.LimitSteps(ctx, keys, since)
}

// Verify checks the queue's invariants and returns a description of each violation (none when
// healthy): every limit's in-flight figures equal the sum over the tickets holding it, no limit holds
// more than MaxConcurrent or MaxInflightTokens (an oversize ticket, alone or beside tickets of no
// cost, excepted; tickets admitted before the limit's configuration last changed are not held to the
// new caps), no unfinished ticket names a limit that does not exist, and every ticket is in a known
// state. Tests run it after every scenario; an operator may run it at any time (it locks nothing).
func (q *Queue) Verify(ctx context.Context) ([]string, error) {
	return q.s.Verify(ctx)
}

// MaxCost bounds a ticket's token cost (a route's Cost, in all), so that no arithmetic on it overflows; a
// usage report above it counts as MaxCost.
const MaxCost = store.MaxCost

// UsageHistory is how long the per-second usage (Usage) and the run times Explain estimates from are
// kept.
const UsageHistory = store.UsageHistory

// AllowanceStatuses are the statuses of l's allowances, in l's order, with state s at now: what each
// counted in its window, what remains, and when it resets. Status and LimitStatus read them so; given
// a throttle.Explanation's limit and state, they are the figures it explains from.
func AllowanceStatuses(l throttle.Limit, s throttle.State, now time.Time) []AllowanceStatus {
	return store.AllowanceStatuses(l, s, now)
}

// ProgramChangedBy is who a limit change made through a Queue without WithChangedBy is recorded as
// made by: "program NAME pid N on HOST", NAME being the base name of the program's path (os.Args[0]).
func ProgramChangedBy() string { return store.ProgramChangedBy() }
