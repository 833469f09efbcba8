// Package pgqueue is Sluice's admission queue in Postgres as its users see it: the tables, their
// embedded migrations, and the administration of limits. Postgres is the single source of truth;
// there is no other state.
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
//   - sluice_usage: what each key admitted per second (requests and reserved tokens), kept an hour,
//     for Queue.Status, Queue.Usage and the operators' tools; admission does not read it.
//
// # Administration
//
// [Migrate] creates and upgrades the tables (run it once per deploy, or let the plugin run it when a
// worker starts). A [Queue] administers one schema: [Queue.UpsertLimits] creates limits or changes
// them at runtime, [Queue.Limit] and [Queue.LimitStatus] read them (as configured, as admission
// applies them, and their buckets), [Queue.Pause] and [Queue.Resume] stop and restart admissions on a
// key, [Queue.Stats] and [Queue.Verify] say how things stand, and [Queue.Status], [Queue.Usage] and
// [Queue.Tickets] say why activities wait (what the sluice command and its dashboard show);
// [MigrationState] says which migrations a schema has. Every change applies at the next
// admission on every replica. The dispatcher's own operations (claims, completions, hand-backs,
// deliveries) are run by the plugin and are not part of this package.
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
//	stats, err := q.Stats(ctx)
//
// # Correctness
//
// A claim locks the limit rows it decides on (FOR UPDATE SKIP LOCKED, in key order), reads the
// in-flight figures and buckets after the lock, and writes them back in the same transaction, so the
// decisions on a key are serialised across every replica and a limit is never exceeded; a busy key
// is skipped, not waited on, and keys never contend with each other. The clock is the database's.
package pgqueue
