// Package throttle holds Sluice's limit definitions and the pure arithmetic of one limit's admission:
// continuously refilled buckets, reservation and reconciliation of token costs, and the tightest-wins
// combination of a limit's parts; with what a user reads back of it (why a ticket waits: [Explanation]).
// It does no I/O and reads no clock: time is an argument, so every rule here is tested over fixed
// instants, and a limit can be tried offline.
//
// # Limits
//
// A [Limit] names a quota and sets any of MaxConcurrent, RequestsPerSecond (with Burst), TokensPerMinute
// (with TokenBurst), InputTokensPerMinute and OutputTokensPerMinute (with theirs) and
// MaxInflightTokens. [Limit.Validate] names the field and value of any mistake.
//
// # Token dimensions
//
// Providers meter tokens differently: OpenAI has one combined budget (TPM), Anthropic separate input
// and output budgets (ITPM and OTPM). A [Cost] gives a ticket's tokens by dimension, Input and
// Output; TokensPerMinute draws on their sum, InputTokensPerMinute on Input, OutputTokensPerMinute on
// Output, and a limit may set any of the three (the tightest wins). A cost given as one figure
// ([Tokens], [Limit.Check], [Limit.Release]) is input, so a single-budget limit behaves exactly as it
// did before the dimensions existed. The output part is reserved in full (a call's max_tokens) and
// reconciled, dimension by dimension, from the usage the call reports ([ReleasedCost]).
//
// The four rates (requests per second, and the three token budgets per minute) are each a
// [Dimension]; [Limit.Rates] yields every one with its [Rate] (per second and per minute, and its
// burst), [Dimension.Draw] is what one ticket takes of it, and [State.Bucket] is its bucket.
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
// With input and output budgets, CheckCost and AdmitCost take a Cost, and ReleaseMany a
// ReleasedCost:
//
//	l := throttle.Limit{Key: "anthropic", InputTokensPerMinute: 400_000, OutputTokensPerMinute: 80_000}.WithDefaults()
//	reserved := throttle.Cost{Input: 1850, Output: 1024} // the prompt, and max_tokens
//	if d := l.CheckCost(s, now, reserved); d.OK() {
//		s = l.AdmitCost(s, now, reserved)
//	}
//	s = l.ReleaseMany(s, later, throttle.ReleasedCost(reserved, throttle.Cost{Input: 1850, Output: 310}, true))
//
// # Learned limits
//
// [Limit.Observe] learns a provider's real rates from its headers; [LearnedLimit] is what to keep of
// them, and [EffectiveLimit] the limit admission applies given the configured limit and what was
// learned.
//
// # Explanations
//
// [Explanation] is why a queued ticket waits, limit by limit ([LimitWait]), and when it is expected
// to be admitted, as pgqueue's Queue.Explain returns it; WaitsFor is a [Reason]'s name
// ([ParseReason]) or one of the waits [WaitNothing], [WaitNotBefore], [WaitAhead] and
// [WaitUnknownLimit].
//
// # Allowances
//
// An [Allowance] is a windowed quota beside a limit's rates: so many requests, tokens or money (in
// integer micro-units of a currency) per calendar hour, day, week or month in a named time zone, or
// per rolling duration. [ParseAllowance] reads the operators' syntax,
// tokens=5000000/day@America/Los_Angeles or usd=5.00/day; [Allowance.Window] gives the window an
// instant falls in, by the zone's clock (a day is 23 or 25 hours when daylight saving time changes).
// [Allowances] apply all of a limit's to a ticket's [Spend]: Check, Admit, and Release in the window
// the ticket was admitted in, with their [AllowanceStates]. A [Limit] carries its allowances
// (Limit.Allowances) and its State their states: [Limit.CheckSpend] and [Limit.AdmitSpend] apply
// the rates and every allowance at once, the tightest winning, and [Limit.SpentAllowance] says which
// allowance is spent, what it counted and when it resets:
//
//	if d := l.CheckSpend(s, now, spend); d.OK() {
//		s = l.AdmitSpend(s, now, spend)
//	} else if spent, ok := l.SpentAllowance(s, now, spend); ok && spent.Refuses(deadline) {
//		spent.Deadline = deadline // Error says when it is why
//		return spent              // fail the activity with spent.Error()
//	}
//
// [PriceTable] turns tokens into the money a money allowance counts.
//
// Time zones are the one thing this package reads from outside: time.LoadLocation loads each
// zone once, from the system's zone database. A program run where there may be none (a scratch
// container) should import time/tzdata.
//
// # Changing limits
//
// [LimitChange] is an operator's change of some fields of a limit; [LimitChange.Apply] gives a rate
// that changed without its burst the default burst of the new rate.
//
// # In the engine
//
// Sluice keeps State in Postgres and applies these functions inside its claim transaction, with the
// limit's row locked, so the arithmetic here is the whole of one limit's admission rule. What is the
// engine's alone (the decision of a claim over a page of a line, fair-share ordering between
// fairness keys, the costs a requeue or a hand-back reconciles with, and the play behind an
// Explanation) is internal and may change between versions. Where one statement must compute a
// rule for many rows at once (the refunds of a batch of completions, the effective rates of an
// overview), the engine writes it in SQL, and its tests check that SQL against the function here on
// random inputs.
package throttle
