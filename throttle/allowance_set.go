package throttle

import (
	"fmt"
	"time"
)

// Spend is what one ticket counts against a limit's allowances, each taking its part (Allowance.Of):
// one request, its tokens, and its cost in money. The zero Spend is one request of no tokens and no
// money.
type Spend struct {
	// Tokens are the ticket's tokens, input and output.
	Tokens Cost `json:"tokens"`
	// Money is the ticket's cost in micro-units of the currency of the limit's money allowances, as a
	// price table computes it from Tokens.
	Money int64 `json:"money,omitzero"`
}

// Of is what s counts against a: 1 for requests, else its tokens in all, input or output, or its
// money. A negative figure counts as 0.
func (a Allowance) Of(s Spend) int64 {
	c := s.Tokens.nonNegative()
	switch a.Meter {
	case MeterRequests:
		return 1
	case MeterInputTokens:
		return c.Input
	case MeterOutputTokens:
		return c.Output
	case MeterMoney:
		return max(0, s.Money)
	}
	return satAdd(c.Input, c.Output)
}

// SpendRelease is one finished ticket as its allowances reconcile it: when it was admitted, what it
// reserved then, and what it used, if reported. The zero SpendRelease reconciles nothing.
type SpendRelease struct {
	// AdmittedAt is the instant the ticket was admitted at: its reconciliation goes to the window it
	// was counted in then (Allowance.Release).
	AdmittedAt time.Time `json:"admitted_at"`
	// Reserved is the Spend the ticket was admitted with.
	Reserved Spend `json:"reserved"`
	// Actual is what the ticket used. It counts only when Reported; otherwise the reservation stands
	// as spent.
	Actual   Spend `json:"actual"`
	Reported bool  `json:"reported"`
	// Void reports that the ticket never ran (cancelled or taken back before it started): all it
	// reserved, its request included, is given back; Actual and Reported are ignored.
	Void bool `json:"void,omitempty"`
}

// Allowances are a limit's allowances, all applied to each ticket: it is admitted only when every
// one has room. It is a plain slice; the methods do not modify it.
type Allowances []Allowance

// AllowanceStates are the states of a limit's allowances, by Allowance.Key: changing an allowance's
// amount keeps its state, changing its meter or period starts a new one. A missing key is a zero
// state; a nil AllowanceStates has counted nothing. The methods of Allowances never modify the map
// they are given: they return a new one, holding the states of the allowances given them only.
type AllowanceStates map[string]AllowanceState

// Validate reports the first problem with as: an invalid allowance (Allowance.Validate), two of the
// same Key (the same meter and period), or money allowances in more than one currency (a price
// table gives costs in one).
func (as Allowances) Validate() error {
	seen := map[string]bool{}
	currency := ""
	for i, a := range as {
		if err := a.Validate(); err != nil {
			return err
		}
		if seen[a.Key()] {
			return fmt.Errorf("throttle: allowance %d: %q has the meter and period of an earlier one (%s): keep one", i, a, a.Key())
		}
		seen[a.Key()] = true
		if a.Meter == MeterMoney {
			if currency != "" && a.Currency != currency {
				return fmt.Errorf("throttle: allowance %d: %q: Currency must be %s like the others, got %s", i, a, currency, a.Currency)
			}
			currency = a.Currency
		}
	}
	return nil
}

// Check reports whether a ticket spending sp can be admitted under every allowance of as at now
// (Allowance.Check), and the index in as of the one that binds: -1 when every one has room, else,
// of those that refuse, the one whose refusal lifts last (a zero RetryAt, never, being the latest).
// The Decision is that allowance's.
func (as Allowances) Check(st AllowanceStates, now time.Time, sp Spend) (Decision, int) {
	d, bind := Decision{Reason: ReasonNone, RetryAt: now}, -1
	for i, a := range as {
		di := a.Check(st[a.Key()], now, a.Of(sp))
		if di.OK() {
			continue
		}
		if bind < 0 || (!d.RetryAt.IsZero() && (di.RetryAt.IsZero() || di.RetryAt.After(d.RetryAt))) {
			d, bind = di, i
		}
	}
	return d, bind
}

// Admit returns st after a ticket spending sp was admitted at now on every allowance of as
// (Allowance.Admit). It does not check: call Check first.
func (as Allowances) Admit(st AllowanceStates, now time.Time, sp Spend) AllowanceStates {
	out := make(AllowanceStates, len(as))
	for _, a := range as {
		out[a.Key()] = a.Admit(st[a.Key()], now, a.Of(sp))
	}
	return out
}

// Release returns st after the ticket of r finished at now, reconciled on every allowance of as in
// the window it was admitted in (Allowance.Release). A void r gives back all it reserved.
func (as Allowances) Release(st AllowanceStates, now time.Time, r SpendRelease) AllowanceStates {
	out := make(AllowanceStates, len(as))
	for _, a := range as {
		actual := int64(-1)
		switch {
		case r.Void:
			actual = 0
		case r.Reported:
			actual = a.Of(r.Actual)
		}
		out[a.Key()] = a.Release(st[a.Key()], now, r.AdmittedAt, a.Of(r.Reserved), actual)
	}
	return out
}

// Join is the decision of a ticket that d and o must both admit, d's the first tested (a limit's
// rates before its allowances): the tightest wins. Its Reason is d's if d refuses, else o's; its
// RetryAt the later of the refusals', a zero RetryAt (only a release, or nothing, makes room) being
// the latest.
func (d Decision) Join(o Decision) Decision {
	switch {
	case o.OK():
		return d
	case d.OK():
		return o
	case d.RetryAt.IsZero() || o.RetryAt.IsZero():
		return Decision{Reason: d.Reason}
	case o.RetryAt.After(d.RetryAt):
		d.RetryAt = o.RetryAt
	}
	return d
}
