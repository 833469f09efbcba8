package throttle

import (
	"time"
)

// AllowanceState is what Sluice keeps for one allowance between admissions: what has been counted in
// its current window. The zero AllowanceState has counted nothing. It is a plain value: the functions
// below return a new one and never modify the one they are given (nor its Earlier).
//
// For a calendar period, Start is the start of the window Used counts; when an instant falls in a
// later window, Used starts again from 0.
//
// A rolling period is counted in RollingSlices+1 slices of Rolling/RollingSlices (rounded up to the
// millisecond), cut alike by every replica from the Unix epoch: Used counts the newest slice, which
// starts at Start, and Earlier the RollingSlices slices before it, oldest first (leading empty
// slices left out). A ticket is admitted when all of them together have room for it, so the slices
// cover the trailing window and a little more: between Rolling and Rolling plus one slice. Hence
// the bound, which holds at every instant: the reservations admitted in any window of length Rolling
// never add up to more than the Amount (less what reported usage gave back; see Release). The price
// of the bound is that a ticket may wait up to one slice (Rolling/24, an hour of a 24h period) longer
// than an exact log of admissions would make it. A token bucket of capacity Amount refilled at
// Amount/Rolling would keep less state but admits up to twice the Amount in one window of Rolling
// (a full bucket spent, then a window's refill); a spend cap is meant not to be overrun, so Sluice
// pays with a short wait instead.
type AllowanceState struct {
	// Start is the start of the window (calendar) or newest slice (rolling) that Used counts. Zero
	// when nothing was ever counted.
	Start time.Time `json:"start,omitzero"`
	// Used is what was counted since Start: reservations, reconciled with the usage reported for
	// them. It may exceed the Amount by debt (usage reported above a reservation).
	Used int64 `json:"used,omitzero"`
	// Earlier, for a rolling period, is what was counted in the slices before Start's, oldest first;
	// nil when they counted nothing and for a calendar period.
	Earlier []int64 `json:"earlier,omitempty"`
	// Held is what the tickets admitted and not yet released reserved, of what Used counts: what
	// reported usage may still give back (Refundable). For a calendar period it counts the tickets
	// of the current window (a new window starts from 0); for a rolling one every ticket in flight.
	Held int64 `json:"held,omitzero"`
}

// Refundable is what the tickets in flight may still give back to a at now, when they report their
// usage: what they reserved of what a counts (Held), at most what it has counted. A requests
// allowance gives nothing back (a request is spent once sent), so it is 0 for one.
func (a Allowance) Refundable(s AllowanceState, now time.Time) int64 {
	if a.Meter == MeterRequests {
		return 0
	}
	s = a.roll(s, now)
	return max(0, min(s.Held, a.Used(s, now)))
}

// Used is what a has counted at now: in the calendar window of now, or in the slices that cover the
// trailing window.
func (a Allowance) Used(s AllowanceState, now time.Time) int64 {
	s = a.roll(s, now)
	if a.Calendar != "" {
		return s.Used
	}
	c := counts(s)
	return sum(c[:])
}

// Check reports whether a ticket counting n (a.Of of its Spend) can be admitted under a at now, and
// if not, ReasonAllowance and when it can: a calendar window's end, or for a rolling period the start
// of the first slice at which enough has fallen out. A ticket counting more than the whole Amount is
// refused with a zero RetryAt: no window will ever admit it (refuse such a ticket rather than let it
// wait). A spent allowance (Used at the Amount or above) refuses even a ticket counting 0, whose
// usage is not known yet. A negative n counts as 0.
func (a Allowance) Check(s AllowanceState, now time.Time, n int64) Decision {
	n = max(0, n)
	if n > a.Amount {
		return Decision{Reason: ReasonAllowance}
	}
	s = a.roll(s, now)
	fits := func(used int64) bool { return used < a.Amount && n <= a.Amount-used }
	if a.Calendar != "" {
		if fits(s.Used) {
			return Decision{Reason: ReasonNone, RetryAt: now}
		}
		_, end := a.Window(latest(now, s.Start))
		return Decision{Reason: ReasonAllowance, RetryAt: end.UTC()}
	}
	c := counts(s)
	if fits(sum(c[:])) {
		return Decision{Reason: ReasonNone, RetryAt: now}
	}
	// After j more slices start, the oldest j have fallen out; after all of them, every one has.
	ms := a.sliceMillis()
	for j := 1; j <= RollingSlices; j++ {
		if fits(sum(c[j:])) {
			return Decision{Reason: ReasonAllowance, RetryAt: s.Start.Add(time.Duration(int64(j)*ms) * time.Millisecond)}
		}
	}
	return Decision{Reason: ReasonAllowance, RetryAt: s.Start.Add(time.Duration(int64(RollingSlices+1)*ms) * time.Millisecond)}
}

// Admit returns s after a ticket counting n was admitted at now: n is counted in now's window or
// slice. It does not check: call Check first. A negative n counts as 0.
func (a Allowance) Admit(s AllowanceState, now time.Time, n int64) AllowanceState {
	s = a.count(a.roll(s, now), now, max(0, n), false)
	s.Held = satAdd(s.Held, max(0, n))
	return s
}

// Release returns s after a ticket admitted at admittedAt, counting reserved then, finished at now
// having used actual (negative: not reported, the reservation stands as spent). The difference is
// reconciled in the window the ticket was admitted in, as a token budget reconciles it: the unused
// part of the reservation is given back, usage above it is counted as debt. When that window has
// ended (or, rolling, its slice no longer covers the trailing window), the reconciliation is dropped:
// a refund from yesterday's window does not credit today's, and yesterday's debt does not charge it.
// A requests allowance counts reserved and actual as 1 each, so it is never refunded. Every ticket
// that counted is released once, reported or not, so that Held drops by what it reserved.
func (a Allowance) Release(s AllowanceState, now, admittedAt time.Time, reserved, actual int64) AllowanceState {
	s = a.roll(s, now)
	if a.Calendar == "" || !admittedAt.Before(s.Start) {
		s.Held = max(0, s.Held-max(0, reserved))
	}
	if actual < 0 {
		return s
	}
	return a.count(s, admittedAt, actual-max(0, reserved), true)
}

// count returns s, rolled to its current window, with n counted in the window or slice of at. An
// instant before Start (a clock behind the one that rolled s) is counted in the current window when
// it is an admission, so that the count errs high, and dropped when it is a reconciliation (release)
// that cannot be placed. Counts stay at 0 or above.
func (a Allowance) count(s AllowanceState, at time.Time, n int64, release bool) AllowanceState {
	if n == 0 {
		return s
	}
	if a.Calendar != "" {
		if release && at.Before(s.Start) {
			return s
		}
		s.Used = max(0, satAdd(s.Used, n))
		return s
	}
	held := s.Held
	ms := a.sliceMillis()
	pos := RollingSlices - int(min(RollingSlices+1, max(0, sliceIndex(s.Start, ms)-sliceIndex(at, ms))))
	if pos < 0 {
		if release {
			return s
		}
		pos = 0
	}
	c := counts(s)
	c[pos] = max(0, satAdd(c[pos], n))
	out := fromCounts(s.Start, c)
	out.Held = held
	return out
}

// roll returns s as of now: a calendar window that ended is replaced by now's, empty; a rolling
// state's slices are moved on so that the newest is now's, the oldest falling out. A now before
// Start (a clock behind the one that rolled s) leaves s as it is: the count errs high, never low.
func (a Allowance) roll(s AllowanceState, now time.Time) AllowanceState {
	if a.Calendar != "" {
		start, _ := a.Window(now)
		if s.Start.IsZero() || start.After(s.Start) {
			return AllowanceState{Start: start.UTC()}
		}
		return s
	}
	ms := a.sliceMillis()
	i := sliceIndex(now, ms)
	if s.Start.IsZero() {
		return AllowanceState{Start: sliceStart(i, ms), Held: s.Held}
	}
	shift := i - sliceIndex(s.Start, ms)
	if shift <= 0 {
		return s
	}
	var moved [RollingSlices + 1]int64
	if shift <= RollingSlices {
		c := counts(s)
		copy(moved[:], c[shift:])
	}
	out := fromCounts(sliceStart(i, ms), moved)
	out.Held = s.Held // every ticket in flight: what fell out of the window is still reserved
	return out
}

// counts are s's rolling counts, oldest first, Used last.
func counts(s AllowanceState) [RollingSlices + 1]int64 {
	var c [RollingSlices + 1]int64
	e := s.Earlier
	if len(e) > RollingSlices {
		e = e[len(e)-RollingSlices:]
	}
	copy(c[RollingSlices-len(e):], e)
	c[RollingSlices] = s.Used
	return c
}

// fromCounts is the state of counts c, the newest starting at start, in its shortest form.
func fromCounts(start time.Time, c [RollingSlices + 1]int64) AllowanceState {
	s := AllowanceState{Start: start, Used: c[RollingSlices]}
	for i, n := range c[:RollingSlices] {
		if n != 0 {
			s.Earlier = append([]int64(nil), c[i:RollingSlices]...)
			break
		}
	}
	return s
}

// sum is the sum of c, saturated.
func sum(c []int64) int64 {
	var t int64
	for _, n := range c {
		t = satAdd(t, n)
	}
	return t
}

// latest is the later of t and u.
func latest(t, u time.Time) time.Time {
	if u.After(t) {
		return u
	}
	return t
}
