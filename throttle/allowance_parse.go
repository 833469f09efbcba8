package throttle

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// allowanceSyntax is what ParseAllowance's errors show as the expected form.
const allowanceSyntax = "METER=AMOUNT/PERIOD[@ZONE], e.g. tokens=5000000/day@America/Los_Angeles"

// ParseAllowance reads an allowance in the operators' syntax, METER=AMOUNT/PERIOD[@ZONE]:
//
//	tokens=5000000/day@America/Los_Angeles   5,000,000 tokens a day, from midnight Pacific time
//	requests=1000/hour                       1,000 requests an hour, UTC
//	usd=5.00/day                             5 dollars a day (money: a currency code, up to 6 decimals)
//	output_tokens=200000/24h                 200,000 output tokens in any 24 hours (rolling)
//
// METER is requests, tokens, input_tokens, output_tokens, or a 3-letter currency code (either case)
// for money. AMOUNT is a whole number (digits, optionally grouped with underscores: 5_000_000), or
// for money a decimal. PERIOD is hour, day, week or month, optionally with @ZONE (an IANA zone;
// default UTC), or a duration as time.ParseDuration reads it (24h, 90m), which is rolling and takes
// no zone. The result is validated; errors name the part that is wrong. OnSpent is not part of the
// syntax and is left zero (wait).
func ParseAllowance(s string) (Allowance, error) {
	bad := func(format string, args ...any) (Allowance, error) {
		return Allowance{}, fmt.Errorf("throttle: allowance %q: %s", s, fmt.Sprintf(format, args...))
	}
	meter, rest, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return bad("no '=': want %s", allowanceSyntax)
	}
	amount, period, ok := strings.Cut(rest, "/")
	if !ok {
		return bad("no '/' before the period: want %s", allowanceSyntax)
	}
	period, zone, hasZone := strings.Cut(period, "@")
	var a Allowance
	switch m := Meter(meter); m {
	case MeterRequests, MeterTokens, MeterInputTokens, MeterOutputTokens:
		a.Meter = m
	default:
		if !isCurrency(strings.ToUpper(meter)) {
			return bad("meter %q: want requests, tokens, input_tokens, output_tokens or a currency code (usd)", meter)
		}
		a.Meter, a.Currency = MeterMoney, strings.ToUpper(meter)
	}
	var err error
	if a.Meter == MeterMoney {
		a.Amount, err = parseMicros(amount)
	} else {
		a.Amount, err = parseCount(amount)
	}
	if err != nil {
		return bad("amount %q: %v", amount, err)
	}
	switch c := Calendar(period); c {
	case CalendarHour, CalendarDay, CalendarWeek, CalendarMonth:
		a.Calendar = c
	default:
		d, err := time.ParseDuration(period)
		if err != nil || d <= 0 {
			return bad("period %q: want hour, day, week, month or a duration such as 24h", period)
		}
		if hasZone {
			return bad("zone %q: a rolling period (%s) takes no zone", zone, period)
		}
		a.Rolling = d
	}
	if hasZone {
		if zone == "" {
			return bad("empty zone after '@': want an IANA zone such as America/Los_Angeles")
		}
		a.Zone = zone
	}
	if err := a.Validate(); err != nil {
		return Allowance{}, err
	}
	return a, nil
}

// parseCount reads a whole number of at most MaxAllowanceAmount, digits optionally grouped by
// single underscores between them.
func parseCount(s string) (int64, error) {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return 0, fmt.Errorf("want a whole number, e.g. 5000000 or 5_000_000")
	}
	digits := strings.ReplaceAll(s, "_", "")
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("want a whole number, e.g. 5000000 or 5_000_000")
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > MaxAllowanceAmount {
		return 0, fmt.Errorf("more than %d", MaxAllowanceAmount)
	}
	if n == 0 {
		return 0, fmt.Errorf("must be more than 0")
	}
	return n, nil
}

// parseMicros reads a decimal amount of money, with up to 6 decimals, as micro-units.
func parseMicros(s string) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && frac == "") {
		return 0, fmt.Errorf("want a decimal amount, e.g. 5.00")
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("want a decimal amount, e.g. 5.00")
		}
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("more than 6 decimals (money counts in millionths)")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > MaxAllowanceAmount/1e6 {
		return 0, fmt.Errorf("more than %d", MaxAllowanceAmount/1e6)
	}
	f, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	n := w*1e6 + f
	if n == 0 {
		return 0, fmt.Errorf("must be more than 0")
	}
	if n > MaxAllowanceAmount {
		return 0, fmt.Errorf("more than %d", MaxAllowanceAmount/1e6)
	}
	return n, nil
}

// String writes a in ParseAllowance's syntax (tokens=5000000/day@America/Los_Angeles, usd=5.00/day,
// output_tokens=200000/24h): ParseAllowance(a.String()) is a for a valid a whose OnSpent is zero
// (String leaves OnSpent out). Money has at least 2 decimals, durations are written in h, m and s.
func (a Allowance) String() string {
	amount := strconv.FormatInt(a.Amount, 10)
	if a.Meter == MeterMoney {
		amount = formatMicros(a.Amount)
	}
	return a.meterName() + "=" + amount + "/" + a.periodName()
}

// UnmarshalJSON reads an allowance given either as its JSON object (meter, currency, amount,
// calendar, zone, rolling in nanoseconds, on_spent: what Sluice stores) or as a string in the
// operators' syntax ("usd=5.00/day@America/Los_Angeles", read by ParseAllowance, OnSpent left zero),
// which is what a person writes in an API call. It does not validate the object form.
func (a *Allowance) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var spec string
		if err := json.Unmarshal(b, &spec); err != nil {
			return err
		}
		parsed, err := ParseAllowance(spec)
		if err != nil {
			return err
		}
		*a = parsed
		return nil
	}
	type plain Allowance // without this method
	return json.Unmarshal(b, (*plain)(a))
}

// FormatAmount writes n in a's unit, as an operator reads it: money as a decimal with its currency
// (5.00 USD), tokens and requests as a count with the meter (5000000 tokens, 1 request).
func (a Allowance) FormatAmount(n int64) string {
	unit := map[Meter]string{MeterRequests: "request", MeterTokens: "token", MeterInputTokens: "input token",
		MeterOutputTokens: "output token"}[a.Meter]
	switch {
	case a.Meter == MeterMoney:
		return formatMicros(n) + " " + a.Currency
	case unit == "":
		unit = string(a.Meter)
	case n != 1:
		unit += "s"
	}
	return strconv.FormatInt(n, 10) + " " + unit
}

// meterName is a's meter as the syntax writes it: its name, or its currency in lower case.
func (a Allowance) meterName() string {
	if a.Meter == MeterMoney {
		return strings.ToLower(a.Currency)
	}
	return string(a.Meter)
}

// periodName is a's period as the syntax writes it, with its zone if it has one.
func (a Allowance) periodName() string {
	p := string(a.Calendar)
	if a.Calendar == "" {
		p = formatRolling(a.Rolling)
	}
	if a.Zone != "" {
		p += "@" + a.Zone
	}
	return p
}

// formatMicros writes micro-units as a decimal with 2 to 6 decimals: 5.00, 0.50, 1.234567.
func formatMicros(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n // only for an invalid Amount; -1<<63 stays negative and prints oddly, not panics
	}
	frac := strings.TrimRight(fmt.Sprintf("%06d", n%1e6), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return sign + strconv.FormatInt(n/1e6, 10) + "." + frac
}

// formatRolling writes a duration of whole seconds as hours, minutes and seconds, leaving out the
// zero parts (24h, 1h30m, 45s); any other duration as time.Duration writes it.
func formatRolling(d time.Duration) string {
	if d <= 0 || d%time.Second != 0 {
		return d.String()
	}
	var b strings.Builder
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.d; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10) + u.name)
			d -= n * u.d
		}
	}
	return b.String()
}
