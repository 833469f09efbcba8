package throttle_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// utc parses an RFC 3339 instant.
func utc(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

// calendar is an allowance of 100 tokens per calendar period c in zone.
func calendar(c throttle.Calendar, zone string) throttle.Allowance {
	return throttle.Allowance{Meter: throttle.MeterTokens, Amount: 100, Calendar: c, Zone: zone}
}

func TestAllowance_Window(t *testing.T) {
	t.Parallel()
	const la, berlin = "America/Los_Angeles", "Europe/Berlin"
	for _, tc := range []struct {
		name       string
		a          throttle.Allowance
		now        string
		start, end string // RFC 3339, in any offset
		length     time.Duration
	}{
		{"DayAtMidnightUTC", calendar(throttle.CalendarDay, ""), "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", 24 * time.Hour},
		{"DayJustBeforeMidnightUTC", calendar(throttle.CalendarDay, ""), "2025-12-31T23:59:59.999999999Z", "2025-12-31T00:00:00Z", "2026-01-01T00:00:00Z", 24 * time.Hour},
		{"DayInLABeforeItsMidnight", calendar(throttle.CalendarDay, la), "2026-01-15T07:59:59Z", "2026-01-14T00:00:00-08:00", "2026-01-15T00:00:00-08:00", 24 * time.Hour},
		{"DayInLAAtItsMidnight", calendar(throttle.CalendarDay, la), "2026-01-15T08:00:00Z", "2026-01-15T00:00:00-08:00", "2026-01-16T00:00:00-08:00", 24 * time.Hour},
		{"LASpringForwardDayIs23h", calendar(throttle.CalendarDay, la), "2026-03-08T09:59:59Z", "2026-03-08T00:00:00-08:00", "2026-03-09T00:00:00-07:00", 23 * time.Hour},
		{"LASpringForwardDayAfterTheJump", calendar(throttle.CalendarDay, la), "2026-03-08T10:00:00Z", "2026-03-08T00:00:00-08:00", "2026-03-09T00:00:00-07:00", 23 * time.Hour},
		{"LAFallBackDayIs25h", calendar(throttle.CalendarDay, la), "2026-11-01T08:30:00Z", "2026-11-01T00:00:00-07:00", "2026-11-02T00:00:00-08:00", 25 * time.Hour},
		{"LAFallBackRepeatedHour", calendar(throttle.CalendarDay, la), "2026-11-01T09:30:00Z", "2026-11-01T00:00:00-07:00", "2026-11-02T00:00:00-08:00", 25 * time.Hour},
		{"LADayAfterFallBack", calendar(throttle.CalendarDay, la), "2026-11-02T08:00:00Z", "2026-11-02T00:00:00-08:00", "2026-11-03T00:00:00-08:00", 24 * time.Hour},
		{"LAHourBeforeTheJump", calendar(throttle.CalendarHour, la), "2026-03-08T09:59:59Z", "2026-03-08T01:00:00-08:00", "2026-03-08T03:00:00-07:00", time.Hour},
		{"LAHourAfterTheJump", calendar(throttle.CalendarHour, la), "2026-03-08T10:00:00Z", "2026-03-08T03:00:00-07:00", "2026-03-08T04:00:00-07:00", time.Hour},
		{"LAFirstOneOClock", calendar(throttle.CalendarHour, la), "2026-11-01T08:59:59Z", "2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00", time.Hour},
		{"LASecondOneOClock", calendar(throttle.CalendarHour, la), "2026-11-01T09:00:00Z", "2026-11-01T01:00:00-08:00", "2026-11-01T02:00:00-08:00", time.Hour},
		{"BerlinSpringForwardDayIs23h", calendar(throttle.CalendarDay, berlin), "2026-03-29T12:00:00Z", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
		{"BerlinFallBackDayIs25h", calendar(throttle.CalendarDay, berlin), "2026-10-25T01:30:00Z", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		{"BerlinWeekWithTheJump", calendar(throttle.CalendarWeek, berlin), "2026-03-29T21:59:59Z", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 167 * time.Hour},
		{"ISOWeekStartsMonday", calendar(throttle.CalendarWeek, ""), "2026-01-01T12:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 7 * 24 * time.Hour},
		{"ISOWeekSundayNight", calendar(throttle.CalendarWeek, la), "2026-03-09T06:59:59Z", "2026-03-02T00:00:00-08:00", "2026-03-09T00:00:00-07:00", 7*24*time.Hour - time.Hour},
		{"ISOWeekMondayMidnight", calendar(throttle.CalendarWeek, la), "2026-03-09T07:00:00Z", "2026-03-09T00:00:00-07:00", "2026-03-16T00:00:00-07:00", 7 * 24 * time.Hour},
		{"Jan31", calendar(throttle.CalendarMonth, ""), "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 31 * 24 * time.Hour},
		{"Feb1", calendar(throttle.CalendarMonth, ""), "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{"Feb28", calendar(throttle.CalendarMonth, ""), "2026-02-28T23:59:59Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24 * time.Hour},
		{"Feb29LeapYear", calendar(throttle.CalendarMonth, ""), "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24 * time.Hour},
		{"Feb29Day", calendar(throttle.CalendarDay, ""), "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z", 24 * time.Hour},
		{"Dec31ToJan1", calendar(throttle.CalendarMonth, ""), "2026-12-31T23:59:59Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * 24 * time.Hour},
		{"Jan1", calendar(throttle.CalendarMonth, ""), "2027-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", 31 * 24 * time.Hour},
		{"MonthInLAWithTheJump", calendar(throttle.CalendarMonth, la), "2026-03-31T23:00:00-07:00", "2026-03-01T00:00:00-08:00", "2026-04-01T00:00:00-07:00", 31*24*time.Hour - time.Hour},
		{"MonthInLAAtUTCsNextMonth", calendar(throttle.CalendarMonth, la), "2026-05-01T03:00:00Z", "2026-04-01T00:00:00-07:00", "2026-05-01T00:00:00-07:00", 30 * 24 * time.Hour},
		{"SaoPauloSkippedMidnight", calendar(throttle.CalendarDay, "America/Sao_Paulo"), "2018-11-04T12:00:00Z", "2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00", 23 * time.Hour},
		{"KolkataHalfHourHours", calendar(throttle.CalendarHour, "Asia/Kolkata"), "2026-06-01T09:10:00Z", "2026-06-01T08:30:00Z", "2026-06-01T09:30:00Z", time.Hour},
		{"LordHoweHourBeforeHalfHourFallBack", calendar(throttle.CalendarHour, "Australia/Lord_Howe"), "2026-04-04T14:45:00Z", "2026-04-04T14:00:00Z", "2026-04-04T15:00:00Z", time.Hour},
		{"LordHoweHalfHourAfterIt", calendar(throttle.CalendarHour, "Australia/Lord_Howe"), "2026-04-04T15:10:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z", 30 * time.Minute},
		{"Rolling", throttle.Allowance{Meter: throttle.MeterTokens, Amount: 1, Rolling: 24 * time.Hour}, "2026-03-08T10:00:00Z", "2026-03-07T10:00:00Z", "2026-03-08T10:00:00Z", 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, tc.a.Validate())
			start, end := tc.a.Window(utc(t, tc.now))
			require.True(t, utc(t, tc.start).Equal(start), "start: want %s, got %v", tc.start, start)
			require.True(t, utc(t, tc.end).Equal(end), "end: want %s, got %v", tc.end, end)
			require.Equal(t, tc.length, end.Sub(start))
		})
	}
}

// windowZones are zones whose clocks do awkward things: daylight saving time by an hour, at midnight
// (Havana, Sao Paulo until 2019), by half an hour (Lord Howe) or by two (Troll); offsets of :30 and
// :45; a skipped day (Apia, 2011-12-30); Ramadan changes (Casablanca).
var windowZones = []string{"UTC", "America/Los_Angeles", "Europe/Berlin", "Australia/Lord_Howe", "America/Sao_Paulo",
	"America/Havana", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Pacific/Apia", "Africa/Casablanca",
	"Antarctica/Troll", "Asia/Tehran"}

// TestAllowance_WindowPartitionsTime: in every zone and period, the windows of random instants
// contain them, follow one another without gap or overlap, have a length the calendar allows, and
// (days, weeks, months) start when the clock first reads their first day's 00:00.
func TestAllowance_WindowPartitionsTime(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(28, 2))
	lo, hi := time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	bounds := map[throttle.Calendar][2]time.Duration{
		throttle.CalendarHour:  {time.Minute, time.Hour},
		throttle.CalendarDay:   {21 * time.Hour, 27 * time.Hour},
		throttle.CalendarWeek:  {6 * 24 * time.Hour, 7*24*time.Hour + 3*time.Hour}, // Apia's week without 2011-12-30 is 6 days
		throttle.CalendarMonth: {27 * 24 * time.Hour, 31*24*time.Hour + 3*time.Hour},
	}
	for _, zone := range windowZones {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		for c, b := range bounds {
			a := calendar(c, zone)
			require.NoError(t, a.Validate())
			for i := range 300 {
				now := time.Unix(lo+r.Int64N(hi-lo), r.Int64N(1e9))
				if zs, _ := now.In(loc).ZoneBounds(); i%2 == 1 && !zs.IsZero() {
					// Half the instants fall within a day or so of a change of offset.
					now = zs.Add(time.Duration(r.Int64N(int64(60*time.Hour))) - 30*time.Hour)
				}
				start, end := a.Window(now)
				msg := fmt.Sprintf("%s at %v: [%v, %v)", a, now, start, end)
				require.False(t, now.Before(start), msg)
				require.True(t, now.Before(end), msg)
				require.True(t, end.Sub(start) >= b[0] && end.Sub(start) <= b[1], "%s: length %v", msg, end.Sub(start))
				s2, e2 := a.Window(start)
				require.True(t, s2.Equal(start) && e2.Equal(end), "%s: the window of its start is [%v, %v)", msg, s2, e2)
				s3, _ := a.Window(end)
				require.True(t, s3.Equal(end), "%s: the next window starts at %v", msg, s3)
				s4, e4 := a.Window(end.Add(-time.Nanosecond))
				require.True(t, s4.Equal(start) && e4.Equal(end), "%s: the window of its last instant is [%v, %v)", msg, s4, e4)
				if c != throttle.CalendarHour && i%4 < 2 {
					requireFirstAt(t, a, start, end, msg)
				}
			}
		}
	}
}

// requireFirstAt checks a day, week or month window against its definition by scanning the zone's
// clock every 5 minutes (offsets change at whole minutes and last far longer) over the 30 hours
// before each bound: start is the first instant at which
// the clock reads the window's label (00:00 of its day, Monday or 1st) or later, and end the first at
// which it reads the next window's.
func requireFirstAt(t *testing.T, a throttle.Allowance, start, end time.Time, msg string) {
	t.Helper()
	loc, err := time.LoadLocation(a.Zone)
	require.NoError(t, err)
	wall := func(at time.Time) time.Time { // the clock's reading, as a UTC time
		l := at.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	}
	w := wall(start)
	label := time.Date(w.Year(), w.Month(), w.Day(), 0, 0, 0, 0, time.UTC)
	next := label.AddDate(0, 0, 1)
	switch a.Calendar {
	case throttle.CalendarWeek:
		label = label.AddDate(0, 0, -(int(w.Weekday())+6)%7)
		next = label.AddDate(0, 0, 7)
	case throttle.CalendarMonth:
		label = time.Date(w.Year(), w.Month(), 1, 0, 0, 0, 0, time.UTC)
		next = label.AddDate(0, 1, 0)
	}
	require.False(t, wall(end).Before(next), "%s: the clock reads %v at the end, before the next label %v", msg, wall(end), next)
	for _, b := range []struct {
		at    time.Time
		label time.Time
	}{{start, label}, {end, next}} {
		require.True(t, wall(b.at.Add(-time.Nanosecond)).Before(b.label), "%s: the clock read %v before %v", msg, b.label, b.at)
		for at := b.at.Add(-30 * time.Hour); at.Before(b.at); at = at.Add(5 * time.Minute) {
			if !wall(at).Before(b.label) { // not require: its cost per call would dominate the test
				t.Fatalf("%s: the clock read %v at %v, before %v", msg, b.label, at, b.at)
			}
		}
	}
}
