package words

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/throttle"
)

// None is the one word for what is not set, not there or not known: an unset limit, no pause, no
// wait, no workflow ID. (JSON leaves such a field out or writes null.)
const None = "none"

// OrNone is s, or None when s is empty.
func OrNone(s string) string { return cmp.Or(s, None) }

// Shown is s for a table: None when empty, quoted when it holds what a terminal would act on (escape
// sequences in a workflow ID).
func Shown(s string) string {
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return OrNone(s)
}

// Num is a limit's figure as set: an integer when it is one, else with up to two decimals, or three
// significant digits under 1, so that a rate of 0.0001/s never reads as 0 ("no limit").
func Num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	if math.Abs(v) < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
}

// Grouped is n with its thousands apart: 40,000.
func Grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)])
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Figure is a figure of a bucket as people read it: grouped by thousands, whole from 100 (rounded
// down, so that a level just short of what is needed never reads as enough), else as set (Num).
func Figure(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return Grouped(int64(math.Floor(v)))
	}
	return Num(v)
}

// CostText is a reservation by dimension: "40,000 in + 500 out".
func CostText(c throttle.Cost) string {
	return Grouped(c.Input) + " in + " + Grouped(c.Output) + " out"
}

// TicketCount is n tickets: "1 ticket", "2,000 tickets".
func TicketCount(n int) string {
	if n == 1 {
		return "1 ticket"
	}
	return Grouped(int64(n)) + " tickets"
}

// Amount is n in allowance a's unit, grouped: "1,234 tokens", "0.25 USD".
func Amount(a throttle.Allowance, n int64) string {
	if a.Meter == throttle.MeterMoney {
		return a.FormatAmount(n)
	}
	s := a.FormatAmount(n)
	_, unit, _ := strings.Cut(s, " ")
	return Grouped(n) + " " + unit
}

// RoundDur is d to the second (to the millisecond under a second): 350ms, 45s, 2m5s.
func RoundDur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// Stamp is instant t in UTC with its date: "2026-03-02 12:00:30 UTC".
func Stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// Clock is instant t in UTC: its time of day on the day of now ("12:00:30 UTC"), else with its date
// (Stamp).
func Clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05 UTC")
	}
	return Stamp(t)
}

// Relative is instant t from now: "in 30s", "5s ago".
func Relative(t, now time.Time) string {
	if d := t.Sub(now); d >= 0 {
		return "in " + RoundDur(d)
	}
	return RoundDur(now.Sub(t)) + " ago"
}

// In is an instant after now as "in 30s (at 12:00:30 UTC)".
func In(t, now time.Time) string {
	return fmt.Sprintf("%s (at %s)", Relative(t, now), Clock(t, now))
}

// Until is an instant as "12:00:30 UTC (in 30s)", or "12:00:25 UTC (5s ago)" when it is past.
func Until(t, now time.Time) string {
	return fmt.Sprintf("%s (%s)", Clock(t, now), Relative(t, now))
}

// inShort is how long from now until at, rounded: "now" when it is not after now.
func inShort(at, now time.Time) string {
	if !at.After(now) {
		return "now"
	}
	return RoundDur(at.Sub(now))
}
