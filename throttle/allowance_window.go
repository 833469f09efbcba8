package throttle

import (
	"time"
)

// Window returns the window of a that now falls in: start <= now < end.
//
// For a calendar period the windows are consecutive and never overlap, whatever the zone does. A day,
// week or month starts at the first instant at which the zone's clock reads its start (00:00 of the
// day, of the week's Monday, of the month's 1st), so it is as long as the clock makes it: 23 or 25
// hours on the days daylight saving time begins or ends, and where a zone skips midnight, the day
// starts when the clock first reads a time of it. An hour is 60 minutes from the local clock's hour
// mark (in a zone 5:30 from UTC, hours start at half past UTC's); the hour repeated when clocks fall
// back is two windows, and a window is cut short at a change of offset by less than an hour. The
// times returned are in a's zone.
//
// For a rolling period the window is the trailing duration, now - Rolling to now, as the allowance
// is meant (it is counted in slices: see AllowanceState).
//
// Window reads no clock. A zone that does not load is taken as UTC: Validate reports it. A
// program whose machines may lack a zone database should import time/tzdata.
func (a Allowance) Window(now time.Time) (start, end time.Time) {
	if a.Calendar == "" {
		return now.Add(-a.Rolling), now
	}
	loc := a.location()
	if a.Calendar == CalendarHour {
		start, end = hourWindow(now, loc)
		return start.In(loc), end.In(loc)
	}
	l := a.label(now.In(loc))
	start = firstAt(l, loc)
	// The clock may read a later label's time and then fall back before now (a zone that falls back
	// across midnight): the window is then the later label's. At most one step in any real zone.
	for range 4 {
		next := a.nextLabel(l)
		end = firstAt(next, loc)
		if end.After(now) {
			break
		}
		l, start = next, end
	}
	return start.In(loc), end.In(loc)
}

// hourWindow is the hour of now in loc: from the last instant, at or before now, at which loc's
// clock read a whole hour, for an hour, within the span of loc's current offset.
func hourWindow(now time.Time, loc *time.Location) (time.Time, time.Time) {
	local := now.In(loc)
	_, off := local.Zone()
	sec := now.Unix() + int64(off)
	start := time.Unix(now.Unix()-(sec%3600+3600)%3600, 0)
	end := start.Add(time.Hour)
	// Where the offset changes by a whole number of hours, the hour marks stay where they were and
	// these bounds change nothing; where it changes by less (Lord Howe's 30 minutes), they keep the
	// windows on either side of the change from overlapping.
	zs, ze := local.ZoneBounds()
	if !zs.IsZero() && zs.After(start) {
		start = zs
	}
	if !ze.IsZero() && ze.Before(end) {
		end = ze
	}
	return start, end
}

// label is the start of the calendar window of the local time t, as a wall-clock reading: a UTC
// time whose fields are the local date at 00:00.
func (a Allowance) label(t time.Time) time.Time {
	y, m, d := t.Date()
	switch a.Calendar {
	case CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	case CalendarMonth:
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// nextLabel is the label of the calendar window after label l's.
func (a Allowance) nextLabel(l time.Time) time.Time {
	switch a.Calendar {
	case CalendarWeek:
		return l.AddDate(0, 0, 7)
	case CalendarMonth:
		return l.AddDate(0, 1, 0) // l is a 1st: no normalisation
	}
	return l.AddDate(0, 0, 1)
}

// firstAt is the first instant at which loc's clock reads wall or later, wall being a UTC time
// whose fields are the reading. Because it is the first such instant, firstAt never decreases as
// wall increases, so windows bounded by it for consecutive labels never overlap.
//
// Within each span of one offset the clock reads instant+offset, which increases with the instant;
// the spans are visited in order from well before wall (no offset exceeds a day), and the answer is
// in the first span whose clock reaches wall: the instant at which it reads wall exactly, or the
// span's start if the clock jumped past wall into it.
func firstAt(wall time.Time, loc *time.Location) time.Time {
	t := wall.Add(-48 * time.Hour)
	for range 64 {
		local := t.In(loc)
		_, off := local.Zone()
		_, spanEnd := local.ZoneBounds()
		c := wall.Add(-time.Duration(off) * time.Second)
		if c.Before(t) {
			c = t
		}
		if spanEnd.IsZero() || c.Before(spanEnd) {
			return c
		}
		t = spanEnd
	}
	return wall // not reached: no zone changes offset 64 times in four days
}

// sliceMillis is the length of one of a rolling allowance's slices, in milliseconds:
// Rolling / RollingSlices rounded up, so that RollingSlices slices cover Rolling.
func (a Allowance) sliceMillis() int64 {
	ms := a.Rolling.Milliseconds()
	return max(1, (ms+RollingSlices-1)/RollingSlices)
}

// sliceIndex is the number of the slice of length ms that t falls in, counted from the Unix epoch, so
// that every replica cuts time alike.
func sliceIndex(t time.Time, ms int64) int64 {
	u := t.UnixMilli()
	i := u / ms
	if u%ms < 0 {
		i--
	}
	return i
}

// sliceStart is the start of slice i of length ms.
func sliceStart(i, ms int64) time.Time { return time.UnixMilli(i * ms).UTC() }
