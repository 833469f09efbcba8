package store

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migration/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change, embedded in the binary.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migration")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		base, dir, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		if !ok || (dir != "up" && dir != "down") {
			return nil, fmt.Errorf("pgqueue: migration file %q is not NNN_name.up.sql or .down.sql", name)
		}
		num, label, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: migration file %q: version: %w", name, err)
		}
		body, err := migrationFS.ReadFile("migration/" + name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: label}
			byVersion[v] = m
		}
		if dir == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// MigrateOptions configures Migrate.
type MigrateOptions struct {
	// Schema to create and migrate. Defaults to DefaultSchema.
	Schema string
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	// Applied lists the versions applied by this call; empty when the schema was current.
	Applied []int
	// Version is the schema's version afterwards. It may be above the newest embedded migration when a
	// newer Sluice migrated the schema: the tables stay compatible within a major version.
	Version int
}

// Migrate creates the schema if needed and applies the embedded migrations it lacks, each in its own
// transaction, recorded in sluice_migration. It is safe to run concurrently from many processes (a
// transaction-level advisory lock per schema serialises them) and to run again: a current schema is
// left alone.
func Migrate(ctx context.Context, db DB, opts MigrateOptions) (MigrateResult, error) {
	schema := cmp.Or(opts.Schema, DefaultSchema)
	if err := ValidateSchema(schema); err != nil {
		return MigrateResult{}, err
	}
	migrations, err := Migrations()
	if err != nil {
		return MigrateResult{}, err
	}
	qs := pgx.Identifier{schema}.Sanitize()
	var res MigrateResult
	for _, m := range migrations {
		err := InTx(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice_migrate'), hashtext($1))`, schema); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+qs); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+qs+`.sluice_migration (
				version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+qs+`.sluice_migration WHERE version = $1)`, m.Version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+qs); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return fmt.Errorf("apply %03d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+qs+`.sluice_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
			res.Applied = append(res.Applied, m.Version)
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("pgqueue: migrate schema %q: %w", schema, err)
		}
	}
	if err := db.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+qs+`.sluice_migration`).Scan(&res.Version); err != nil {
		return res, fmt.Errorf("pgqueue: migrate schema %q: read version: %w", schema, err)
	}
	return res, nil
}

// MigrateDown reverts the embedded migrations above targetVersion, newest first. Version 0 drops
// every Sluice table (the schema itself is left).
func MigrateDown(ctx context.Context, db DB, opts MigrateOptions, targetVersion int) error {
	schema := cmp.Or(opts.Schema, DefaultSchema)
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	migrations, err := Migrations()
	if err != nil {
		return err
	}
	qs := pgx.Identifier{schema}.Sanitize()
	for i := len(migrations) - 1; i >= 0; i-- {
		m := migrations[i]
		if m.Version <= targetVersion {
			break
		}
		err := InTx(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice_migrate'), hashtext($1))`, schema); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `DELETE FROM `+qs+`.sluice_migration WHERE version = $1`, m.Version)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+qs); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, m.Down)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgqueue: revert %03d_%s in schema %q: %w", m.Version, m.Name, schema, err)
		}
	}
	return nil
}

// SchemaState says how a schema stands against the embedded migrations.
type SchemaState struct {
	Schema string
	// Exists says the schema has Sluice's migration table: Migrate has run in it.
	Exists bool
	// Version is the newest applied migration, 0 when none.
	Version int
	// Applied are the migrations applied, in version order, with when; Pending the embedded ones not
	// applied yet.
	Applied []AppliedMigration
	Pending []Migration
}

// AppliedMigration is a migration recorded in a schema.
type AppliedMigration struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// MigrationState reads which migrations a schema has and which it lacks. It changes nothing; a
// schema Migrate never ran in has Exists false and every migration pending.
func MigrationState(ctx context.Context, db DB, opts MigrateOptions) (SchemaState, error) {
	st := SchemaState{Schema: cmp.Or(opts.Schema, DefaultSchema)}
	if err := ValidateSchema(st.Schema); err != nil {
		return st, err
	}
	migrations, err := Migrations()
	if err != nil {
		return st, err
	}
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`,
		pgx.Identifier{st.Schema, "sluice_migration"}.Sanitize()).Scan(&st.Exists); err != nil {
		return st, fmt.Errorf("pgqueue: schema %q: %w", st.Schema, err)
	}
	done := map[int]bool{}
	if st.Exists {
		rows, err := db.Query(ctx, `SELECT version, name, applied_at FROM `+pgx.Identifier{st.Schema}.Sanitize()+
			`.sluice_migration ORDER BY version`)
		if err != nil {
			return st, fmt.Errorf("pgqueue: schema %q: %w", st.Schema, err)
		}
		st.Applied, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedMigration, error) {
			var m AppliedMigration
			err := row.Scan(&m.Version, &m.Name, &m.AppliedAt)
			return m, err
		})
		if err != nil {
			return st, fmt.Errorf("pgqueue: schema %q: %w", st.Schema, err)
		}
		for _, m := range st.Applied {
			done[m.Version], st.Version = true, max(st.Version, m.Version)
		}
	}
	for _, m := range migrations {
		if !done[m.Version] {
			st.Pending = append(st.Pending, m)
		}
	}
	return st, nil
}
