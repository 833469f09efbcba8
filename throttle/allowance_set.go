package throttle

import (
	"fmt"
	"strings"
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
	// Charged are the allowances (by Allowance.Key) that counted the ticket when it was admitted:
	// only they reconcile it. An allowance added while the ticket was in flight never counted it,
	// so it is given nothing back. Empty reconciles nothing.
	Charged []string `json:"charged,omitempty"`
}

// Allowances are a limit's allowances, all applied to each ticket: it is admitted only when every
// one has room. It is a plain slice; the methods do not modify it.
type Allowances []Allowance

// AllowanceStates are the states of a limit's allowances, by Allowance.Key: changing an allowance's
// amount keeps its state, changing its meter or period starts a new one. A missing key is a zero
// state; a nil AllowanceStates has counted nothing. The methods of Allowances never modify the map
// they are given: they return a new one.
//
// The state of an allowance that was removed is kept until its window has passed (calendar) or all
// it counted has fallen out (rolling), and is reconciled with the tickets it counted meanwhile: an
// allowance removed and added back within its window goes on from what it had counted, so removing
// it is no way to reset a day's spend, and the refund of a ticket it counted before goes back to
// it, not to a count that never held the ticket.
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
	out := as.kept(st, now)
	for _, a := range as {
		out[a.Key()] = a.Admit(st[a.Key()], now, a.Of(sp))
	}
	return out
}

// Keys are the keys of as (Allowance.Key), in order: what a ticket admitted now is charged on
// (SpendRelease.Charged).
func (as Allowances) Keys() []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Key()
	}
	return out
}

// Release returns st after the ticket of r finished at now, reconciled in the window it was admitted
// in (Allowance.Release) on each allowance that counted it (r.Charged): one of as, or one removed
// since whose state is kept. A void r gives back all it reserved.
func (as Allowances) Release(st AllowanceStates, now time.Time, r SpendRelease) AllowanceStates {
	out := as.kept(st, now)
	for _, key := range r.Charged {
		a, ok := as.byKey(key)
		if !ok {
			if a, ok = allowanceOfKey(key); !ok {
				continue
			}
		}
		s, counted := st[key]
		if !counted {
			continue // its state is gone: its window has passed, and with it the reconciliation
		}
		actual := int64(-1)
		switch {
		case r.Void:
			actual = 0
		case r.Reported:
			actual = a.Of(r.Actual)
		}
		out[key] = a.Release(s, now, r.AdmittedAt, a.Of(r.Reserved), actual)
	}
	return out
}

// byKey returns the allowance of as whose Key is key.
func (as Allowances) byKey(key string) (Allowance, bool) {
	for _, a := range as {
		if a.Key() == key {
			return a, true
		}
	}
	return Allowance{}, false
}

// kept returns a copy of st holding the states of the allowances of as and, of the others (removed
// from the limit), those that still count something at now.
func (as Allowances) kept(st AllowanceStates, now time.Time) AllowanceStates {
	out := make(AllowanceStates, len(st)+len(as))
	for key, s := range st {
		if _, ok := as.byKey(key); ok {
			out[key] = s
			continue
		}
		if a, ok := allowanceOfKey(key); ok {
			if r := a.roll(s, now); r.Used != 0 || r.Earlier != nil || r.Held != 0 {
				out[key] = s
			}
		}
	}
	return out
}

// allowanceOfKey is the allowance a Key names (Allowance.Key: meter and period), with an Amount of 1:
// what a removed allowance's state is rolled and reconciled with. Reports false for a key that is
// not one.
func allowanceOfKey(key string) (Allowance, bool) {
	meter, period, ok := strings.Cut(key, "/")
	if !ok {
		return Allowance{}, false
	}
	a, err := ParseAllowance(meter + "=1/" + period)
	return a, err == nil
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
