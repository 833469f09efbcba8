// Package engine holds the statements the dispatcher runs against Sluice's tables: [Queue.Enqueue]
// writes a ticket; [Queue.Claim] is the throttled dequeue, run by any number of processes;
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
package engine
