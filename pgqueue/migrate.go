package pgqueue

import (
	"context"

	"github.com/sluicehq/sluice/internal/store"
)

// Migrate creates the schema if needed and applies the embedded migrations it lacks, each in its own
// transaction, recorded in sluice_migration. It is safe to run concurrently from many processes (a
// transaction-level advisory lock per schema serialises them) and to run again: a current schema is
// left alone. docs/upgrading.md says which migrations are safe while replicas of the previous version
// run.
func Migrate(ctx context.Context, db DB, opts MigrateOptions) (MigrateResult, error) {
	return store.Migrate(ctx, db, opts)
}

// MigrateDown reverts the embedded migrations above targetVersion, newest first. Version 0 drops
// every Sluice table (the schema itself is left).
func MigrateDown(ctx context.Context, db DB, opts MigrateOptions, targetVersion int) error {
	return store.MigrateDown(ctx, db, opts, targetVersion)
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) { return store.Migrations() }

// MigrationState reads which migrations a schema has and which it lacks. It changes nothing; a
// schema Migrate never ran in has Exists false and every migration pending.
func MigrationState(ctx context.Context, db DB, opts MigrateOptions) (SchemaState, error) {
	return store.MigrationState(ctx, db, opts)
}

// ValidateSchema reports whether name is usable as the schema Sluice's tables live in: a lower-case
// Postgres identifier (letters, digits, underscores) of at most 63 bytes. It is checked, not quoted
// into acceptance, so that a hostile name never reaches SQL. New, Migrate and the plugin's options
// call it.
func ValidateSchema(name string) error { return store.ValidateSchema(name) }

// TicketRefusal decodes the Refusal of a ticket whose OutcomeKind is OutcomeRefused, stored by this
// version or by 0.1.0.
func TicketRefusal(t Ticket) (Refusal, error) { return store.TicketRefusal(t) }
