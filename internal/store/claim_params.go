package store

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Defaults and bounds of ClaimParams.
const (
	DefaultClaimMax      = 100
	DefaultClaimMaxLines = 256
)

// ClaimParams bounds one claim.
type ClaimParams struct {
	// Max is the most tickets admitted by the claim, over all lines. Defaults to DefaultClaimMax.
	Max int
	// MaxLines is the most lines (limit keys with queued tickets) one claim locks. Claimers racing on
	// many keys thus split them between themselves instead of one taking all. A claim locks lines in
	// chunks (4, then twice the last) and reads each chunk's first pages in one statement, so that many
	// short lines (one per tenant) cost a few statements per claim. Defaults to DefaultClaimMaxLines.
	MaxLines int
	// MinRemaining skips tickets whose deadline is closer than this: admitting them would spend quota
	// on work Temporal is about to time out. They are removed. Defaults to 0.
	MinRemaining time.Duration
	// Owner, when set, is the claimer's own owner ID: the tickets of that owner it admits go straight
	// to running, and are returned so, for the claimer to run at once without a TakeAdmitted, and
	// that owner is not notified. Defaults to "" (every admitted ticket waits for its owner's take).
	Owner string
}

func (p ClaimParams) withDefaults() ClaimParams {
	p.Max = cmp.Or(p.Max, DefaultClaimMax)
	p.MaxLines = cmp.Or(p.MaxLines, DefaultClaimMaxLines)
	return p
}

func (p ClaimParams) validate() error {
	if p.Max < 0 || p.Max > 10_000 {
		return fmt.Errorf("sluice: ClaimParams.Max must be in [1, 10000], got %d", p.Max)
	}
	if p.MaxLines < 0 || p.MaxLines > 10_000 {
		return fmt.Errorf("sluice: ClaimParams.MaxLines must be in [1, 10000], got %d", p.MaxLines)
	}
	if p.MinRemaining < 0 {
		return fmt.Errorf("sluice: ClaimParams.MinRemaining must be >= 0, got %s", p.MinRemaining)
	}
	return nil
}

// ClaimResult is what one claim did.
type ClaimResult struct {
	// Admitted are the tickets admitted, now in state admitted (their owners were notified), or, for
	// ClaimParams.Owner's, in state running.
	Admitted []Ticket
	// Expired are queued tickets removed because their deadline passed (or was closer than
	// MinRemaining): Temporal has timed them out, so there is nothing to report.
	Expired []Ticket
	// Refused are queued tickets refused because an allowance of one of their limits is spent and
	// they are not to wait for it (throttle.Spent.Refuses): now finished, with OutcomeRefused and
	// their Refusal as the outcome, for a Deliverer to fail their activities.
	Refused []Ticket
	// Blocked gives, for each line this claim looked at and stopped on, why its head waits.
	Blocked map[string]throttle.Reason
	// RetryAt is the earliest instant at which a line blocked by a rate, a token budget, a pause or a
	// not-before time could admit again. Zero when no line is waiting on time alone (a release of
	// running work, which is notified, is what unblocks it), or when no line was looked at.
	RetryAt time.Time
	// Busy reports that lines with queued work were skipped because another claimer held them.
	Busy bool
	// More reports that the claim admitted tickets, stopped at MaxLines with budget left, and so may
	// have left lines with work unread: the claimer should claim again at once, as after a full batch.
	More bool
	// WaitsOnRelease reports that tickets were left waiting for room a completion can make: a line
	// blocked, or a ticket passed over, for concurrency, in-flight tokens or the token budget (a
	// completion's refund), or a ticket passed over because another claimer held one of its limits.
	// The claimer should then claim again at TopicReleased; otherwise that notification cannot change
	// its claim's outcome.
	WaitsOnRelease bool
	// QueueDepth is, for each line that admitted tickets, how many were still queued in it after the
	// claim, counted up to 1,000 so that the count stays as cheap as the claim.
	QueueDepth map[string]int64
	// Now is the database instant of the claim's decisions: wait RetryAt.Sub(Now), so that clock skew
	// between this process and the database does not matter.
	Now time.Time
}

func (r *ClaimResult) retryAt(t time.Time) {
	if !t.IsZero() && (r.RetryAt.IsZero() || t.Before(r.RetryAt)) {
		r.RetryAt = t
	}
}

// releaseLifts reports whether a completion's release can lift a wait for reason r: a cap, a token
// budget's refund, or an allowance's (usage reported below the reservation gives back what it
// counted).
func releaseLifts(r throttle.Reason) bool {
	return r == throttle.ReasonConcurrency || r == throttle.ReasonInflightTokens || r.IsTokens() || r == throttle.ReasonAllowance
}

// later returns the later of two instants.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rereadAdmitted fails when page holds a ticket this claim admitted already. Such a ticket is still
// queued in the table until the store, so a page that read it again would admit it twice: that is a
// bug, and the claim rolls back rather than charge the ticket twice, naming where it happened.
func (c *claimRun) rereadAdmitted(line string, page []Ticket) error {
	for _, t := range page {
		if slices.ContainsFunc(c.admitted, func(a admittedTicket) bool { return a.id == t.ID }) {
			return fmt.Errorf("ticket %d of line %q read again after this claim admitted it (lines %q)", t.ID, line, c.lines)
		}
	}
	return nil
}
