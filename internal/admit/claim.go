package admit

import (
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// Candidate is a queued ticket as a claim sees it. The zero Candidate draws on no limit, costs
// nothing and has neither a deadline nor a not-before time.
type Candidate struct {
	// ID identifies the ticket in the ClaimDecision.
	ID int64
	// LimitKeys are the limits the ticket draws on, its line's among them, in the order they are
	// checked. It is admitted only when every one has room.
	LimitKeys []string
	// Cost is the reservation, in tokens in all, that admission takes from every limit.
	Cost int64
	// OutputCost is the part of Cost reserved for output tokens; the rest is input (see Cost, the
	// type). Zero for a cost given as one figure.
	OutputCost int64
	// Money is the reservation in money, micro-units of the currency of the money allowances of the
	// limits it draws on (a price table's estimate of Cost); zero when it has none.
	Money int64
	// VStart is the ticket's fair-share start tag (Place.Start): admitting it moves its line's virtual
	// time up to it.
	VStart float64
	// Deadline is when Temporal times the ticket out. Zero means none.
	Deadline time.Time
	// NotBefore keeps the ticket out of admission until then. Zero means at once.
	NotBefore time.Time
}

// LimitState is a limit, as admission applies it, and its state: what a claim holds while it holds
// the limit's lock. It is a plain value.
type LimitState struct {
	Limit throttle.Limit
	State throttle.State
}

// LockFunc locks, without waiting for another claimer, the limits of keys, and returns those it
// locked, by key, and the instant to decide at from then on: read after the new locks, so that no
// decision uses an instant older than the state it reads. A limit it does not return is held by
// another claimer (or does not exist). A zero instant keeps the current one: return it when nothing
// was locked.
type LockFunc func(keys []string) (map[string]LimitState, time.Time, error)

// ClaimPage is one page of a line's queued tickets and what a claim knows when it decides on them:
// DecideClaim's input. A claim that reads a line a page at a time feeds each ClaimDecision back into
// the next page: the limits Lock locked and the States into Limits, Unavailable, VTime, Now, and the
// Budget left.
type ClaimPage struct {
	// Line is the key of the limit whose line the candidates wait in.
	Line string
	// Candidates are queued tickets of the line, in line order (priority, then fair-share start tag,
	// then arrival).
	Candidates []Candidate
	// Limits are the limits the claim holds locked, by key, with their states; the line's among them.
	Limits map[string]LimitState
	// Unavailable are the keys of limits another claimer holds, found so far: a candidate drawing on
	// one is skipped.
	Unavailable map[string]bool
	// Lock locks the limits a candidate draws on that are neither in Limits nor Unavailable, as it is
	// reached. Nil means none can be locked: every such limit is unavailable.
	Lock LockFunc
	// VTime is the line's virtual time: the fair-share start tag of the ticket it admitted last.
	VTime float64
	// Now is the instant of the decisions, read after the locks of Limits were taken.
	Now time.Time
	// MinRemaining expires candidates whose deadline is closer than this to the instant of the
	// decision.
	MinRemaining time.Duration
	// Budget is the most candidates to admit. Zero admits none.
	Budget int
}

// Admission is a ticket a claim admitted, and the instant it did.
type Admission struct {
	ID int64
	At time.Time
}

// Wait is a ticket a claim left waiting for a limit: the limit's key, and why it refused.
type Wait struct {
	ID     int64
	Key    string
	Reason throttle.Reason
}

// RefusedTicket is a ticket a claim refused because an allowance of one of its limits is spent and
// the ticket is not to wait for it (Spent.Refuses): its ID and its Refusal.
type RefusedTicket struct {
	ID int64
	throttle.Refusal
}

// ClaimDecision is what DecideClaim decided on one page of a line.
type ClaimDecision struct {
	// Refused are the candidates refused because an allowance is spent, in line order: they are to
	// be removed and failed, not admitted.
	Refused []RefusedTicket
	// Admitted are the candidates admitted, in line order, each at the instant of its decision.
	Admitted []Admission
	// Expired are the IDs of the candidates whose deadline passed (or is closer than MinRemaining),
	// in line order: they are to be removed, not admitted.
	Expired []int64
	// Waits are the candidates left waiting for a limit, in line order: those passed over because
	// another of their limits refused, and, when the line is blocked, its head and every candidate
	// after it, with the line's key and reason.
	Waits []Wait
	// Blocked is why the line's head waits for the line's own limit; ReasonNone when it does not (the
	// page was read to its end, or the budget was spent).
	Blocked throttle.Reason
	// RetryAt is the earliest instant at which a candidate held back by a rate, a token budget, a
	// pause or its not-before time could be admitted. Zero when none waits on time alone.
	RetryAt time.Time
	// Busy reports that candidates were skipped because another claimer holds one of their limits.
	Busy bool
	// States are the new states of the limits the page admitted on, by key.
	States map[string]throttle.State
	// Unavailable are the keys of limits found held by another claimer on this page.
	Unavailable []string
	// VTime is the line's virtual time after the page's admissions.
	VTime float64
	// Now is the instant of the page's last decision: the page's Now, or the last instant Lock
	// returned.
	Now time.Time
}

func (d *ClaimDecision) retryAt(t time.Time) {
	if !t.IsZero() && (d.RetryAt.IsZero() || t.Before(d.RetryAt)) {
		d.RetryAt = t
	}
}

// DecideClaim decides which of a page of a line's candidates a claim admits, in line order, and why
// the others wait. It is the whole admission rule of a claim: the store loads the locked limits and
// the candidates, calls it, and stores what it returns. Candidates are taken in turn until Budget of
// them are admitted:
//
//   - one whose deadline is not after the instant plus MinRemaining is expired: admitting it would
//     spend quota on work Temporal is about to time out;
//   - one whose NotBefore is after the instant waits for it (RetryAt);
//   - the limits it draws on that are neither held nor known to be unavailable are locked (Lock),
//     and the instant moves to the one Lock returns;
//   - one that draws on an unavailable limit is skipped (Busy);
//   - its limits are checked (Limit.Check) in LimitKeys order, and the first that refuses holds it.
//     When that is the line's own limit, the candidate is the line's head and waits for it, so that a
//     large ticket is not starved by small ones behind it: the line is Blocked, and the head and every
//     candidate after it wait for that reason. When it is another limit (a full tenant), the candidate
//     is passed over, so that one full tenant does not stall the line. Either way RetryAt is at most
//     the refusal's;
//   - when the limit that refuses does so for a spent allowance (ReasonAllowance) that is not to be
//     waited for (Spent.Refuses: the allowance refuses, it will never have room, or the candidate's
//     deadline comes first), the candidate is Refused instead, whichever limit it is: a refusal is
//     final, so it neither blocks the line nor holds a place in it;
//   - otherwise it is admitted on every limit (Limit.Admit) at the instant, and the line's virtual
//     time moves up to its VStart.
//
// The deadline and not-before time are tested at the instant before the candidate's own limits are
// locked, and not again after a lock moves the instant on (as the store's claim always did): a
// candidate may thus be admitted up to the time its locks took closer to its deadline than
// MinRemaining, never before its not-before time.
//
// DecideClaim does no I/O of its own and reads no clock; it does not modify p. It returns Lock's
// error, if any, with what it had decided before it.
func DecideClaim(p ClaimPage) (ClaimDecision, error) {
	d := ClaimDecision{VTime: p.VTime, Now: p.Now}
	held := maps.Clone(p.Limits)
	if held == nil {
		held = map[string]LimitState{}
	}
	gone := maps.Clone(p.Unavailable)
	if gone == nil {
		gone = map[string]bool{}
	}
	budget := p.Budget
	for i, c := range p.Candidates {
		if budget <= 0 {
			break
		}
		if !c.Deadline.IsZero() && !d.Now.Add(p.MinRemaining).Before(c.Deadline) {
			d.Expired = append(d.Expired, c.ID)
			continue
		}
		if d.Now.Before(c.NotBefore) {
			d.retryAt(c.NotBefore)
			continue
		}
		if err := d.lock(p.Lock, c.LimitKeys, held, gone); err != nil {
			return d, err
		}
		if slices.ContainsFunc(c.LimitKeys, func(k string) bool { return gone[k] }) {
			d.Busy = true
			continue
		}
		if key, refused := check(held, c, d.Now); !refused.OK() {
			if sp, ok := refusal(held[key], c, d.Now, refused); ok {
				d.Refused = append(d.Refused, RefusedTicket{ID: c.ID, Refusal: throttle.Refusal{Limit: key, Spent: sp}})
				continue
			}
			d.retryAt(refused.RetryAt)
			if key != p.Line {
				d.Waits = append(d.Waits, Wait{ID: c.ID, Key: key, Reason: refused.Reason})
				continue
			}
			d.Blocked = refused.Reason
			for _, w := range p.Candidates[i:] {
				d.Waits = append(d.Waits, Wait{ID: w.ID, Key: key, Reason: refused.Reason})
			}
			break
		}
		d.admit(held, c)
		budget--
	}
	return d, nil
}

// lock locks the limits of keys that are neither held nor gone, adding them to held, or to gone (and
// Unavailable) when another claimer holds them.
func (d *ClaimDecision) lock(lock LockFunc, keys []string, held map[string]LimitState, gone map[string]bool) error {
	var missing []string
	for _, k := range keys {
		if _, ok := held[k]; !ok && !gone[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var got map[string]LimitState
	if lock != nil {
		var (
			now time.Time
			err error
		)
		if got, now, err = lock(missing); err != nil {
			return err
		}
		if !now.IsZero() {
			d.Now = now
		}
	}
	for _, k := range missing {
		if ls, ok := got[k]; ok {
			held[k] = ls
		} else if !gone[k] {
			gone[k] = true
			d.Unavailable = append(d.Unavailable, k)
		}
	}
	return nil
}

// check returns the first of c's limits that refuses it at now, and its Decision; an OK Decision when
// every one has room.
func check(held map[string]LimitState, c Candidate, now time.Time) (string, throttle.Decision) {
	for _, k := range c.LimitKeys {
		ls := held[k]
		if d := ls.Limit.CheckSpend(ls.State, now, c.spend()); !d.OK() {
			return k, d
		}
	}
	return "", throttle.Decision{Reason: throttle.ReasonNone, RetryAt: now}
}

// admit admits c on every limit it draws on at d.Now.
func (d *ClaimDecision) admit(held map[string]LimitState, c Candidate) {
	if d.States == nil {
		d.States = map[string]throttle.State{}
	}
	for _, k := range c.LimitKeys {
		ls := held[k]
		ls.State = ls.Limit.AdmitSpend(ls.State, d.Now, c.spend())
		held[k] = ls
		d.States[k] = ls.State
	}
	d.VTime = FairAdvance(d.VTime, c.VStart)
	d.Admitted = append(d.Admitted, Admission{ID: c.ID, At: d.Now})
}

// split is c's reservation by dimension.
func (c Candidate) split() throttle.Cost { return CostOf(c.Cost, c.OutputCost) }

// spend is what c counts against allowances.
func (c Candidate) spend() throttle.Spend { return throttle.Spend{Tokens: c.split(), Money: c.Money} }

// refusal returns the spent allowance of ls that refuses c at now for good (Spent.Refuses), and
// false when the decision d of ls is not an allowance's or c may wait for it.
func refusal(ls LimitState, c Candidate, now time.Time, d throttle.Decision) (throttle.Spent, bool) {
	if d.Reason != throttle.ReasonAllowance {
		return throttle.Spent{}, false
	}
	sp, ok := ls.Limit.SpentAllowance(ls.State, now, c.spend())
	if !ok || !sp.Refuses(c.Deadline) {
		return throttle.Spent{}, false
	}
	sp.Deadline = c.Deadline // for its Error to say when the deadline is why
	return sp, true
}
