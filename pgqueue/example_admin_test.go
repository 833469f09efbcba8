package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Administration from any program that reaches the database: every change applies at the next
// admission on every replica.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: "sluice"}); err != nil {
		log.Fatal(err)
	}
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	if err := q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 50, TokensPerMinute: 90_000}); err != nil {
		log.Fatal(err)
	}
	if err := q.Pause(ctx, "openai", time.Now().Add(time.Minute)); err != nil { // an incident: hold every replica
		log.Fatal(err)
	}
	if err := q.Resume(ctx, "openai"); err != nil {
		log.Fatal(err)
	}
	status, err := q.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range status {
		fmt.Printf("%s: %d queued, %d running\n", s.Configured.Key, s.Queued, s.Admitted+s.Running)
	}
}

// Limits change at runtime: UpsertLimits replaces the configuration and keeps the admission state
// (buckets, running tickets, a pause). Every replica applies it at its next admission.
func ExampleQueue_UpsertLimits() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}

	// The provider raised the account's quota; the tenant's cap goes down.
	err = q.UpsertLimits(ctx,
		throttle.Limit{Key: "openai", MaxConcurrent: 100, RequestsPerSecond: 20, TokensPerMinute: 200_000},
		throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1},
	)
	if err != nil {
		log.Fatal(err) // each limit is validated first: nothing was written
	}
}

// UpsertLimitsTx changes limits in the caller's transaction, with the caller's own writes: the change
// applies when the transaction commits.
func ExampleQueue_UpsertLimitsTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE tenants SET plan = 'pro' WHERE id = $1", "acme"); err != nil {
			return err
		}
		return q.UpsertLimitsTx(ctx, tx, throttle.Limit{Key: "tenant:acme", MaxConcurrent: 10})
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Pause stops admissions on a key on every replica, as a provider's 429 does; running activities go
// on. Resume lifts the pause at once, whatever set it.
func ExampleQueue_Pause() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}

	// An incident at the provider: hold every replica for ten minutes at most.
	if err := q.Pause(ctx, "openai", time.Now().Add(10*time.Minute)); err != nil {
		log.Fatal(err)
	}
	// ... the provider is back early.
	if err := q.Resume(ctx, "openai"); err != nil {
		log.Fatal(err)
	}
}

// LimitStatus shows a limit as configured, as admission applies it now (lowered to what the
// provider's headers taught), and its state.
func ExampleQueue_LimitStatus() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}

	st, err := q.LimitStatus(ctx, "openai")
	if errors.Is(err, pgqueue.ErrUnknownLimit) {
		log.Fatal("no limit openai: a worker with the plugin creates it, or UpsertLimits")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("tokens a minute: %v configured, %v applied\n", st.Configured.TokensPerMinute, st.Effective.TokensPerMinute)
	fmt.Printf("running: %d, %d tokens reserved\n", st.State.InflightCount, st.State.InflightTokens)
	if st.State.PausedUntil.After(time.Now()) {
		fmt.Printf("paused until %s\n", st.State.PausedUntil.Format(time.RFC3339))
	}
}

// Verify checks the tables' invariants (a health check, or after an incident); it locks and changes
// nothing.
func ExampleQueue_Verify() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}

	violations, err := q.Verify(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range violations {
		fmt.Println(v)
	}
	if len(violations) > 0 {
		os.Exit(1)
	}
}
