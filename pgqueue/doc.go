// Package pgqueue is Sluice's admission queue in Postgres: the tables, their embedded migrations, and
// every SQL statement Sluice runs. Postgres is the single source of truth; there is no other state.
//
// # Tables
//
// Migrate creates, in a configurable schema (DefaultSchema unless told otherwise):
//
//   - sluice_limit: one row per limit, with its configuration and its admission state (buckets,
//     in-flight figures, a pause, the fair-share virtual time). Changing a row's configuration is how
//     limits change at runtime, on every replica, at the next admission:
//     UPDATE sluice.sluice_limit SET max_concurrent = 20 WHERE key = 'openai';
//   - sluice_ticket: one row per activity attempt waiting for, holding, or just done with admission.
//     Finished rows are deleted once their outcome is delivered.
//   - sluice_fair: the fair-share finish tag of each fairness key in a line.
//   - sluice_owner: the lease of each live process.
//
// # Operations
//
// [Queue.Enqueue] writes a ticket; [Queue.Claim] is the throttled dequeue, run by any number of
// processes; [Queue.TakeAdmitted] hands an owner what was admitted for it; [Queue.Complete] releases
// and reconciles, storing the outcome; [Queue.Requeue] puts a ticket back in line without spending an
// attempt; [Queue.HandBack] returns a dead owner's tickets to Temporal; [Queue.TakeDeliveries] and
// [Queue.Delivered] deliver outcomes until Temporal has them; [Queue.Stats] and [Queue.Verify] say how
// things stand. A [Notifier] turns LISTEN/NOTIFY into wake-ups; callers poll as a fallback.
//
//	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: "sluice"}); err != nil { ... }
//	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
//	err = q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 50, TokensPerMinute: 90_000})
//	t, err := q.Enqueue(ctx, pgqueue.EnqueueParams{LimitKeys: []string{"openai"}, Cost: 1200, Owner: "w1"})
//	res, err := q.Claim(ctx, pgqueue.ClaimParams{})
//	// ... run res.Admitted, then:
//	err = q.Complete(ctx, pgqueue.CompleteParams{TicketID: t.ID, ActualCost: 950})
//
// # Correctness
//
// A claim locks the limit rows it decides on (FOR UPDATE SKIP LOCKED, in key order), reads the
// in-flight figures and buckets after the lock, and writes them back in the same transaction, so the
// decisions on a key are serialised across every replica and a limit is never exceeded; a busy key
// is skipped, not waited on, and keys never contend with each other. The clock is the database's.
package pgqueue
