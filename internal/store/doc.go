// Package store is Sluice's admission engine in Postgres: the tables and their embedded migrations,
// the statements the plugin's dispatcher runs against them (the protocol below), and the
// administration and read model that package pgqueue exposes to users. It is internal: its protocol
// may change between versions, while pgqueue's API is kept (make api-check).
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
//     A run whose outcome Temporal has is deleted as it completes (CompleteParams.Delivered); a
//     finished row keeps an outcome until it is delivered.
//   - sluice_release: what completions released, per limit, until the next claim folds it in.
//   - sluice_fair: the fair-share finish tag of each fairness key in a line.
//   - sluice_owner: the lease of each live process.
//   - sluice_usage: what each key admitted per second (requests and reserved tokens), kept an hour,
//     for Queue.Status, Queue.Usage and the operators' tools; admission does not read it.
//   - sluice_limit_change: every change of a limit's configuration and of what headers taught, with
//     before, after, when and who, written by a trigger on sluice_limit (so SQL changes are recorded
//     too) and kept LimitHistoryRetention; read by Queue.LimitHistory and Queue.LimitSteps.
//   - sluice_run_time: how long each completed run held each of its limits, a row per key and
//     completion batch, kept an hour (UsageHistory); read by Queue.Explain for run times.
//
// # Administration and the read model
//
// [Migrate] creates and upgrades the tables (run it once per deploy, or let the plugin run it when a
// worker starts). A [Queue] administers one schema: [Queue.UpsertLimits] creates limits or changes
// them at runtime and [Queue.ChangeLimit] changes some fields of one, [Queue.Limit] reads one as
// configured, [Queue.Pause] and [Queue.Resume] stop and restart admissions on a key,
// [Queue.DeleteLimit] deletes a key no unfinished ticket names, and [Queue.Verify] checks the
// invariants. The read model is what the sluice command and its dashboard
// show, in the same types and, in the command's --json and the dashboard's API, the same JSON names:
// [Queue.Status] ([KeyStatus]: a limit as configured and as admission applies it, its tickets and its
// last minute), [Queue.Overview] (every key, sorted and paged), [Queue.Usage] ([UsagePoint]s) and
// [Queue.Tickets] ([Ticket]s, their task tokens and outcomes never in JSON), [Queue.LimitHistory]
// ([LimitRecord]s: who changed a limit, when, from what to what; [WithChangedBy] says who) and
// [Queue.LimitSteps] (the limit as it stood over time, for charts); [MigrationState] says which
// migrations a schema has. Every change applies at the next admission on every replica.
//
//	if _, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: "sluice"}); err != nil {
//		log.Fatal(err)
//	}
//	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
//	if err != nil {
//		log.Fatal(err)
//	}
//	if err := q.UpsertLimits(ctx, throttle.Limit{Key: "openai", MaxConcurrent: 50, TokensPerMinute: 90_000}); err != nil {
//		log.Fatal(err)
//	}
//	if err := q.Pause(ctx, "openai", time.Now().Add(time.Minute)); err != nil { // an incident: hold every replica
//		log.Fatal(err)
//	}
//	if err := q.Resume(ctx, "openai"); err != nil {
//		log.Fatal(err)
//	}
//	status, err := q.Status(ctx, "openai")
//
// # The dispatcher's statements
//
// The plugin's dispatcher runs the protocol; package pgqueue does not expose it: [Queue.Enqueue] writes a
// ticket ([Queue.EnqueueMany] a batch, in one statement); [Queue.Claim] is the throttled dequeue, run
// by any number of processes; [Queue.TakeAdmitted] hands an owner what was admitted for it;
// [Queue.Complete] releases and reconciles, deleting the ticket when Temporal has the outcome
// already and storing the outcome otherwise; [Queue.Requeue] puts a ticket back in
// line without spending an attempt; [Queue.HandBack] returns a dead owner's tickets to Temporal;
// [Queue.TakeDeliveries] and [Queue.Delivered] deliver outcomes until Temporal has them; leases say
// which owners live. A [Notifier] turns LISTEN/NOTIFY into wake-ups; callers poll as a fallback.
//
// # Correctness
//
// A claim locks the limit rows it decides on (FOR NO KEY UPDATE SKIP LOCKED, in key order), reads the
// in-flight figures and buckets after the lock, and writes them back in the same transaction, so the
// decisions on a key are serialised across every replica and a limit is never exceeded; a busy key
// is skipped, not waited on, and keys never contend with each other. The clock is the database's.
//
// An enqueue locks the limit rows its tickets name FOR KEY SHARE, as a foreign key's check does, which
// conflicts with no claim and only with [Queue.DeleteLimit]'s FOR UPDATE: a ticket is never written
// for a key a concurrent deletion removed.
//
// Completions do not take that lock: [Queue.CompleteMany] appends what its tickets release, summed
// per limit, to a ledger (sluice_release), and the next claim holding a limit row folds the pending
// releases into it before it decides. Until then the row's in-flight figures are high by what is
// pending, so a claim can only under-admit, never over-admit; readers (Status, Verify) net the
// pending releases out. Finishing work thus never makes a claimer skip a key or wait, and a
// completion is one statement whatever the number of keys.
//
// Writes are batched where a guarantee allows: a batch of tickets is one INSERT (with the fair-share
// tags and the retry places computed in it), a batch of completions one statement, a claim admits
// up to its Max in one transaction.
package store
