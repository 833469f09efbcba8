// Package admit is the engine's admission arithmetic beyond one limit, moved out of the public
// throttle package because users never call it and it may change with the engine: the decision of a
// claim over a page of a line ([DecideClaim]), fair-share ordering between fairness keys ([FairTag],
// [FairAdvance], [Place]), the play behind a throttle.Explanation ([Explain], from [Standing] and
// [RunTimes]), and the costs a release is reconciled with when no usage was reported ([AbandonedCost],
// [RefusedCost], [ReportedUsage]).
//
// Like throttle, it does no I/O and reads no clock: time is an argument. It applies throttle's rules
// for one limit (Limit.CheckSpend, AdmitSpend, ReleaseMany) and adds none of its own to them.
//
// # Claims
//
// [DecideClaim] is the decision core of a claim: given a page of a line's queued tickets
// ([Candidate]), the limits the claim holds locked and their states ([LimitState]), and the instant,
// it returns which tickets are admitted, which expired, which are refused, and why the rest wait,
// with the head of the line waiting for its own limit and a ticket held back only by another limit
// passed over. The limits a ticket draws on beyond its line are locked as it is reached, through a
// [LockFunc].
//
// # Fair share
//
// Within a line, tickets of equal priority share it across fairness keys by start-time fair queuing:
// [FairTag] gives a ticket its start tag at enqueue, from its key's last finish tag and the line's
// virtual time, and [FairAdvance] moves the virtual time as tickets are admitted; [Place.Compare]
// is the order of admission. The store tags a batch of tickets in SQL, and its tests check those
// tags against FairTag.
package admit
