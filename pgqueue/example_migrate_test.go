package pgqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
)

// Migrate creates the schema and applies the migrations it lacks. The plugin runs it when a worker
// starts; run it yourself to migrate at deploy time instead.
func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	res, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("applied %v, schema at version %d\n", res.Applied, res.Version)
}

func ExampleMigrations() {
	ms, err := pgqueue.Migrations()
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%03d %s\n", m.Version, m.Name)
	}

	// Output:
	// 001 create_queue
	// 002 learned_limits
	// 003 release_ledger
	// 004 narrow_ticket_indexes
	// 005 usage
	// 006 token_dimensions
	// 007 checked_changes
	// 008 key_prefix_index
	// 009 limit_history
	// 010 usage_returned
	// 011 allowances
	// 012 allowance_charges
	// 013 run_times
	// 014 listening_owners
}

func ExampleValidateSchema() {
	for _, name := range []string{"sluice_prod", "Sluice", "sluice; DROP TABLE users"} {
		fmt.Printf("%q: %v\n", name, pgqueue.ValidateSchema(name))
	}

	// Output:
	// "sluice_prod": <nil>
	// "Sluice": pgqueue: Schema must match ^[a-z_][a-z0-9_]*$ and be at most 63 bytes, got "Sluice"
	// "sluice; DROP TABLE users": pgqueue: Schema must match ^[a-z_][a-z0-9_]*$ and be at most 63 bytes, got "sluice; DROP TABLE users"
}

// New does not touch the database: run Migrate first, or let a worker with the plugin do it.
func ExampleNew() {
	// The pool dials when it is first used.
	pool, err := pgxpool.New(context.Background(), "postgres://localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	q, err := pgqueue.New(pool, pgqueue.Options{}) // the zero Options: DefaultSchema
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(q.Schema())

	// Output:
	// sluice
}
