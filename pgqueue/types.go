package pgqueue

import (
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// KeyStatus is how one limit stands, for operators: its configuration, what admission applies, its
// tickets, its line's head and what it admitted over the last minute. It is read in one statement
// that locks nothing. It is a plain value; its JSON names (configured, effective, state, queued, ...)
// are what the sluice command's status --json and the dashboard's api/status serve.
type KeyStatus = store.KeyStatus

// AllowanceStatus is how one allowance of a limit stands, for operators: what it has counted in its
// window (reservations, reconciled with the usage reported so far), what remains, and when it resets.
type AllowanceStatus = store.AllowanceStatus

// StatusParams selects the keys of Queue.StatusPage: the first Limit of those that start with Prefix,
// in key order.
type StatusParams = store.StatusParams

// StatusPage is the status of the first keys a StatusParams selects, in key order, and how many keys
// start with its prefix: Total less len(Keys) were left out. It is a plain value.
type StatusPage = store.StatusPage

// LimitStatus is a limit as configured and as admission applies it now: the part of a KeyStatus that
// comes from the limit's row alone.
type LimitStatus = store.LimitStatus

// UsagePoint is what a key admitted during one step of a usage series: tickets, and the tokens they
// reserved, in all and by dimension.
type UsagePoint = store.UsagePoint

// Overview is one page of keys, the number of keys that match, and the instant it was read at. It is
// a plain value; Queue.Overview returns it, with Rows empty but not nil when no key is on the page.
type Overview = store.Overview

// OverviewParams selects one page of an overview. Its zero value with a Limit set is the first page
// of every key, by key. Its JSON names (prefix, sort, desc, limit, offset) are those the dashboard's
// api/overview echoes.
type OverviewParams = store.OverviewParams

// OverviewRow is one key of an overview: its line, and how much of its limits it uses. It is a plain
// value. Its JSON leaves out the times that are zero when unset, and OldestWait, which is the
// Overview's Now less OldestQueued.
type OverviewRow = store.OverviewRow

// OverviewSort names what an overview is ordered by.
type OverviewSort = store.OverviewSort

// Ticket is one activity invocation's claim on its limits. It is a plain value. Its JSON (what the
// sluice command's tickets --json prints) leaves out what is not for operators' eyes: TaskToken, the
// Outcome's bytes and TraceContext; and the times that are zero when unset.
type Ticket = store.Ticket

// TicketState is where a ticket is in its life.
type TicketState = store.TicketState

// KeyTicket is a ticket as a limit's list shows it: the ticket and, while it waits, its place among
// the tickets waiting on the limit and what holds it now.
type KeyTicket = store.KeyTicket

// TicketQuery finds the tickets of a Temporal workflow: FindTickets' input.
type TicketQuery = store.TicketQuery

// TicketExplanation is a ticket and, while it waits for admission, why.
type TicketExplanation = store.TicketExplanation

// Refusal is why a claim refused a ticket, its stored outcome: throttle.Refusal (see there).
type Refusal = throttle.Refusal

// LimitRecord is one recorded change of a limit: when, what kind, who, and the limit before and after
// (for ChangeLearned, the learned figures). A trigger on sluice_limit writes it, so changes made in SQL
// are recorded too; the admission state (buckets, in-flight figures, pauses) is not. It is a plain
// value; its JSON names are what the sluice command's limits history --json and the dashboard's
// api/history serve.
type LimitRecord = store.LimitRecord

// FieldChange is one field of a limit that a LimitRecord changed, under throttle.Limit's JSON name.
// Zero means no limit of that kind (for ChangeLearned: nothing learned); a created limit's Before and a
// deleted limit's After are zero.
//
// Field "allowances" is one allowance, matched by its meter and period (throttle.Allowance.Key):
// BeforeAllowance and AfterAllowance are it before and after, nil where it was added or removed, and
// Before and After its Amount (money in micro-units), zero where it is nil. Its Amount, its OnSpent
// (an empty one being OnSpentWait) or both differ. The allowances are left out of the other fields.
type FieldChange = store.FieldChange

// ChangeKind is what a LimitRecord records.
type ChangeKind = store.ChangeKind

// LimitStep is a limit as it stood from At until the next step (the last one until now): as
// configured, and as admission applied it (Configured lowered to what the provider's headers had
// taught, throttle.EffectiveLimit). Before a limit was created both are the zero Limit (with Key set):
// no limit. It is a plain value; its JSON names are what the dashboard's api/status serves.
type LimitStep = store.LimitStep

// DB is what both a *pgxpool.Pool and a pgx.Tx offer: Migrate runs on either.
type DB = store.DB

// MigrateOptions configures Migrate.
type MigrateOptions = store.MigrateOptions

// MigrateResult says what Migrate did.
type MigrateResult = store.MigrateResult

// Migration is one versioned schema change, embedded in the binary.
type Migration = store.Migration

// SchemaState says how a schema stands against the embedded migrations.
type SchemaState = store.SchemaState

// AppliedMigration is a migration recorded in a schema.
type AppliedMigration = store.AppliedMigration

// The values of TicketState, Ticket.OutcomeKind, ChangeKind and OverviewSort, and the bounds of
// Overview and LimitHistory.
const (
	// TicketStateQueued waits in its line for admission.
	TicketStateQueued = store.TicketStateQueued
	// TicketStateAdmitted holds its reservation on every limit and waits for its owner to start it.
	TicketStateAdmitted = store.TicketStateAdmitted
	// TicketStateRunning is being run by its owner; it still holds its reservation.
	TicketStateRunning = store.TicketStateRunning
	// TicketStateFinished has released its limits; its outcome waits to be delivered to Temporal.
	TicketStateFinished = store.TicketStateFinished
	// TicketStateReturned was handed back to Temporal for a retry and is kept so that the retry takes
	// its place in line.
	TicketStateReturned = store.TicketStateReturned
	OutcomeCompleted    = store.OutcomeCompleted
	OutcomeFailed       = store.OutcomeFailed
	OutcomeCanceled     = store.OutcomeCanceled
	OutcomePending      = store.OutcomePending
	// OutcomeHandedBack marks a ticket whose owner died or stopped before running it to the end: it is
	// reported to Temporal as a retryable failure.
	OutcomeHandedBack = store.OutcomeHandedBack
	// OutcomeRefused marks a ticket a claim refused because an allowance of one of its limits is spent
	// (ClaimResult.Refused): its outcome is its Refusal as JSON, which the worker turns into the
	// activity's non-retryable failure with its own failure converter.
	OutcomeRefused = store.OutcomeRefused
	// ChangeCreated is a limit that came into being (UpsertLimits, EnsureLimits, ChangeLimit with
	// create, an INSERT): Before is nil.
	ChangeCreated = store.ChangeCreated
	// ChangeConfigured is a change of the configuration: what UpsertLimits and ChangeLimit write, or an
	// UPDATE of those columns.
	ChangeConfigured = store.ChangeConfigured
	// ChangeLearned is a change of what a provider's rate-limit headers taught (Observe): Before and
	// After hold the learned figures, zero where nothing was learned; admission applies the configured
	// limit lowered to them (throttle.EffectiveLimit).
	ChangeLearned = store.ChangeLearned
	// ChangeDeleted is a limit deleted (DeleteLimit, or a DELETE in SQL): After is nil.
	ChangeDeleted        = store.ChangeDeleted
	OverviewByKey        = store.OverviewByKey
	OverviewByQueued     = store.OverviewByQueued
	OverviewByOldestWait = store.OverviewByOldestWait
	OverviewByUse        = store.OverviewByUse
	// MaxOverviewLimit is the most keys one page of an overview may hold.
	MaxOverviewLimit = store.MaxOverviewLimit
	// MaxLimitHistory is the most records LimitHistory returns in one call.
	MaxLimitHistory = store.MaxLimitHistory
	// LimitHistoryRetention is how long Prune keeps the limit history (sluice_limit_change). Changes are
	// rare, so the table stays small: 90 days answer "who changed this, and when" across an incident's
	// review without keeping it forever.
	LimitHistoryRetention = store.LimitHistoryRetention
)
