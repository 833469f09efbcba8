// Package pgqueue is the administration and read model of Sluice's tables in Postgres: limits created,
// changed, paused and deleted at runtime; how each limit stands; why a ticket waits and when it is
// expected to be admitted; who changed a limit, and when; and the migrations. The sluice command and
// its dashboard are built on it. Postgres is the single source of truth; there is no other state.
// The plugin (package interceptor) runs the admission itself (the enqueue, the throttled claim, the
// completion and the hand-back); a program administers and reads with a [Queue].
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
// # Correctness
//
// Every admission decision on a key is serialised across every replica by a lock on the key's row in
// sluice_limit, with the database's clock, so a limit is never exceeded; docs/proof.md says how this
// is tested. A change made here applies at the next admission on every replica: an allowance added
// mid-flight counts from its addition, a resized one keeps its count.
package pgqueue
