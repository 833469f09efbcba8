// Package throttle holds Sluice's limit definitions and the pure arithmetic of admission: continuously
// refilled buckets, reservation and reconciliation of token costs, the tightest-wins combination of a
// limit's parts, and fair-share ordering. It does no I/O and reads no clock: time is an argument, so
// every rule here is tested over fixed instants.
//
// # Limits
//
// A [Limit] names a quota and sets any of MaxConcurrent, RequestsPerSecond (with Burst), TokensPerMinute
// (with TokenBurst) and MaxInflightTokens. [Limit.Validate] names the field and value of any mistake.
//
// # Admission
//
// [Limit.Check] decides whether a ticket fits the limit's [State] at an instant and, if not, gives the
// [Reason] and when to look again; [Limit.Admit] reserves its cost and [Limit.Release] reconciles the
// reservation with the actual usage when the ticket finishes:
//
//	l := throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 90_000}.WithDefaults()
//	var s throttle.State
//	if d := l.Check(s, now, 1200); d.OK() {
//		s = l.Admit(s, now, 1200)
//	}
//	// ... later, the call reported 800 tokens used: 400 go back to the bucket.
//	s = l.Release(s, later, 1200, 800)
//
// # Claims
//
// [DecideClaim] is the decision core of a claim: given a page of a line's queued tickets
// ([Candidate]), the limits the claim holds locked and their states ([LimitState]), and the instant,
// it returns which tickets are admitted, which expired, and why the rest wait, with the head of the
// line waiting for its own limit and a ticket held back only by another limit passed over. The
// limits a ticket draws on beyond its line are locked as it is reached, through a [LockFunc].
//
// # Learned limits
//
// [Limit.Observe] learns a provider's real rates from its headers; [LearnedLimit] is what to keep of
// them, and [EffectiveLimit] the limit admission applies given the configured limit and what was
// learned.
//
// pgqueue keeps State in Postgres and runs these functions inside its claim transaction, with the
// limit's row locked, so the arithmetic here is the whole of the admission rule: pgqueue loads the
// rows, calls throttle, and stores what it returns.
package throttle
