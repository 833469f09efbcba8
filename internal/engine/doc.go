// Package engine holds the statements the dispatcher runs against Sluice's tables: [Queue.Enqueue]
// writes a ticket ([Queue.EnqueueMany] a batch, in one statement); [Queue.Claim] is the throttled dequeue, run by any number of processes;
// [Queue.TakeAdmitted] hands an owner what was admitted for it; [Queue.Complete] releases and
// reconciles, storing the outcome; [Queue.Requeue] puts a ticket back in line without spending an
// attempt; [Queue.HandBack] returns a dead owner's tickets to Temporal; [Queue.TakeDeliveries] and
// [Queue.Delivered] deliver outcomes until Temporal has them; leases say which owners live. A
// [Notifier] turns LISTEN/NOTIFY into wake-ups; callers poll as a fallback. It also holds the
// limit-row statements pgqueue's administration surface is built on.
//
// A claim locks the limit rows it decides on (FOR UPDATE SKIP LOCKED, in key order), reads the
// in-flight figures and buckets after the lock, and writes them back in the same transaction, so the
// decisions on a key are serialised across every replica and a limit is never exceeded; a busy key
// is skipped, not waited on, and keys never contend with each other. The clock is the database's.
//
// Completions do not take that lock: [Queue.CompleteMany] appends what its tickets release, summed
// per limit, to a ledger (sluice_release), and the next claim holding a limit row folds the pending
// releases into it before it decides. Until then the row's in-flight figures are high by what is
// pending, so a claim can only under-admit, never over-admit; readers (Stats, Verify, LimitStatus)
// net the pending releases out. Finishing work thus never makes a claimer skip a key or wait, and a
// completion is one statement whatever the number of keys.
//
// Writes are batched where a guarantee allows: a batch of tickets is one INSERT (with the fair-share
// tags and the retry places computed in it), a batch of completions one statement, a claim admits
// up to its Max in one transaction.
package engine
