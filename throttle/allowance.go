package throttle

import (
	"fmt"
	"sync"
	"time"
)

// Meter is what an Allowance counts.
type Meter string

// The meters an Allowance may count.
const (
	// MeterRequests counts tickets: each admission is one request.
	MeterRequests Meter = "requests"
	// MeterTokens counts tokens in all, input and output (a Cost's Total).
	MeterTokens Meter = "tokens"
	// MeterInputTokens counts input tokens (a Cost's Input).
	MeterInputTokens Meter = "input_tokens"
	// MeterOutputTokens counts output tokens (a Cost's Output).
	MeterOutputTokens Meter = "output_tokens"
	// MeterMoney counts money in integer micro-units of the Allowance's Currency (1_000_000 is one
	// dollar of USD), as a price table computes it from tokens (Spend.Money).
	MeterMoney Meter = "money"
)

// Calendar is a calendar period: the window an Allowance counts in, in its time zone.
type Calendar string

// The calendar periods. Each window starts when the zone's clock first reads its start (local
// midnight for a day, Monday's for a week, the 1st's for a month), so a day is 23 or 25 hours long on
// the days daylight saving time begins or ends. An hour is always an hour (60 minutes from the local
// clock's hour mark), cut short only where a zone's offset changes by less than an hour (Lord Howe).
const (
	CalendarHour  Calendar = "hour"
	CalendarDay   Calendar = "day"
	CalendarWeek  Calendar = "week" // ISO: Monday to Sunday
	CalendarMonth Calendar = "month"
)

// OnSpent says what happens to a ticket that an allowance has no room for.
type OnSpent string

// What happens to a ticket when an allowance is spent.
const (
	// OnSpentWait keeps the ticket in line, to be admitted when the allowance has room again (a
	// calendar window resets, or enough of a rolling one falls out). The zero OnSpent means this.
	OnSpentWait OnSpent = "wait"
	// OnSpentRefuse fails the activity at once with a non-retryable error that names the allowance,
	// what was used and when it resets.
	OnSpentRefuse OnSpent = "refuse"
)

// RollingSlices is how many slices a rolling allowance's duration is counted in: the resolution of
// the trailing window (see AllowanceState).
const RollingSlices = 24

// Bounds of an Allowance's figures.
const (
	// MaxAllowanceAmount is the largest Amount accepted: 1e18 (a million million dollars in
	// micro-units), small enough that sums of amounts cannot overflow.
	MaxAllowanceAmount int64 = 1e18
	// MinRolling and MaxRolling bound a rolling period.
	MinRolling = time.Second
	MaxRolling = 366 * 24 * time.Hour
)

// Allowance is a windowed quota of one limit: at most Amount of what Meter counts in each window of
// its period, a calendar window (Calendar, in Zone) or a rolling duration (Rolling, the trailing
// window ending at each instant). A limit may carry several; the tightest of all its rates and
// allowances wins. Amounts are reserved at admission from a ticket's estimate and reconciled with
// the usage it reports (Allowance.Check, Admit, Release; Allowances for all of a limit's at once).
//
// An Allowance is a plain comparable value, safe to copy. The zero Allowance is not valid: set
// Meter, Amount and one period, then call Validate. ParseAllowance reads the operators' syntax,
// tokens=5000000/day@America/Los_Angeles; String writes it.
type Allowance struct {
	// Meter is what the allowance counts. Required.
	Meter Meter `json:"meter"`
	// Currency is the ISO 4217 code of a MeterMoney allowance, in upper case ("USD"); empty for the
	// other meters.
	Currency string `json:"currency,omitempty"`
	// Amount is how much may be counted in one window, in Meter's unit (money in micro-units). It
	// must be in 1..MaxAllowanceAmount.
	Amount int64 `json:"amount"`
	// Calendar is the calendar period. Exactly one of Calendar and Rolling is set.
	Calendar Calendar `json:"calendar,omitempty"`
	// Zone is the IANA time zone of a calendar period ("America/Los_Angeles"), as time.LoadLocation
	// reads it; "Local" is refused (it would differ between replicas). Defaults to UTC.
	Zone string `json:"zone,omitempty"`
	// Rolling is the duration of a rolling period: a whole number of seconds in
	// MinRolling..MaxRolling.
	Rolling time.Duration `json:"rolling,omitempty"`
	// OnSpent is what happens to a ticket the allowance has no room for. Defaults to OnSpentWait.
	OnSpent OnSpent `json:"on_spent,omitempty"`
}

// Validate reports the first problem with a, naming the field and the bad value.
func (a Allowance) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("throttle: allowance %q: %s must be %s, got %v", a, field, want, v)
	}
	switch a.Meter {
	case MeterRequests, MeterTokens, MeterInputTokens, MeterOutputTokens:
		if a.Currency != "" {
			return bad("Currency", fmt.Sprintf("%q", a.Currency), "empty when Meter is not money")
		}
	case MeterMoney:
		if !isCurrency(a.Currency) {
			return bad("Currency", fmt.Sprintf("%q", a.Currency), "a 3-letter ISO 4217 code in upper case (USD)")
		}
	default:
		return bad("Meter", fmt.Sprintf("%q", a.Meter), "one of requests, tokens, input_tokens, output_tokens, money")
	}
	if a.Amount <= 0 || a.Amount > MaxAllowanceAmount {
		return bad("Amount", a.Amount, fmt.Sprintf("in 1..%d", MaxAllowanceAmount))
	}
	switch {
	case a.Calendar != "" && a.Rolling != 0:
		return fmt.Errorf("throttle: allowance %q: set either Calendar or Rolling, not both (Calendar %q, Rolling %v)",
			a, a.Calendar, a.Rolling)
	case a.Calendar == "" && a.Rolling == 0:
		return fmt.Errorf("throttle: allowance %q: set one of Calendar (hour, day, week, month) or Rolling", a)
	case a.Rolling != 0:
		if a.Rolling < MinRolling || a.Rolling > MaxRolling {
			return bad("Rolling", a.Rolling, fmt.Sprintf("in %v..%v", MinRolling, MaxRolling))
		}
		if a.Rolling%time.Second != 0 {
			return bad("Rolling", a.Rolling, "a whole number of seconds")
		}
		if a.Zone != "" {
			return bad("Zone", fmt.Sprintf("%q", a.Zone), "empty for a rolling period")
		}
	default:
		switch a.Calendar {
		case CalendarHour, CalendarDay, CalendarWeek, CalendarMonth:
		default:
			return bad("Calendar", fmt.Sprintf("%q", a.Calendar), "one of hour, day, week, month")
		}
		if _, err := loadZone(a.Zone); err != nil {
			return fmt.Errorf("throttle: allowance %q: Zone must be an IANA time zone, got %q (%w)", a, a.Zone, err)
		}
	}
	switch a.OnSpent {
	case "", OnSpentWait, OnSpentRefuse:
	default:
		return bad("OnSpent", fmt.Sprintf("%q", a.OnSpent), "wait or refuse")
	}
	return nil
}

// Key names a's meter and period, as String writes them without the amount:
// "tokens/day@America/Los_Angeles", "usd/24h". It identifies a's state among a limit's allowances
// (AllowanceStates), so that changing an allowance's Amount keeps what its window has counted while
// changing what it counts or its period starts afresh.
func (a Allowance) Key() string { return a.meterName() + "/" + a.periodName() }

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// zones caches the time zones loaded by name, so that a claim's window arithmetic does not read the
// zone database once per ticket. Only successful loads are kept.
var zones sync.Map // string -> *time.Location

// loadZone loads the zone named name: UTC for "", an error for "Local" (which would differ between
// replicas) and for a name time.LoadLocation does not find. Loading reads the system's zone database,
// or the one embedded by a program that imports time/tzdata.
func loadZone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("the machine's Local zone differs between replicas: name the zone")
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, l)
	return l, nil
}

// location is a's zone, UTC when it does not load (Validate reports that).
func (a Allowance) location() *time.Location {
	l, err := loadZone(a.Zone)
	if err != nil {
		return time.UTC
	}
	return l
}

// satAdd is a+b, saturated at the bounds of int64.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return 1<<63 - 1
	case a < 0 && b < 0 && s >= 0:
		return -1 << 63
	}
	return s
}
