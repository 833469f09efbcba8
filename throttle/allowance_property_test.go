package throttle_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

// heldTicket is a ticket a property test admitted: when, what it reserved, and what it used (negative:
// not reported), once released.
type heldTicket struct {
	at               time.Time
	reserved, actual int64
}

// charge is what the ticket counts against the bound: its usage when it was reported below its
// reservation, else its reservation. Debt (usage above it) is the estimate's error, not admission's.
func (h heldTicket) charge() int64 {
	if h.actual >= 0 && h.actual < h.reserved {
		return h.actual
	}
	return h.reserved
}

// hooks see what stream does: each check, after it was made, and each admission and release,
// after it was applied. A nil hook is not called.
type hooks struct {
	check   func(s throttle.AllowanceState, now time.Time, n int64, d throttle.Decision)
	admit   func(now time.Time, n int64)
	release func(now time.Time, h heldTicket)
}

// stream drives a with random checks, admissions and releases from start, steps of up to maxStep
// apart. Costs are up to 60% of the amount, and now and then above all of it. Releases report
// nothing, nothing used, the reservation, or up to twice it; or, when refunds is false, nothing or
// the reservation. It returns every ticket admitted, released or not.
func stream(r *rand.Rand, a throttle.Allowance, start time.Time, maxStep time.Duration, steps int, refunds bool, h hooks) []heldTicket {
	var (
		s       throttle.AllowanceState
		all     []heldTicket
		running []int // indexes in all
	)
	now := start
	for range steps {
		now = now.Add(time.Duration(r.Int64N(int64(maxStep))))
		n := r.Int64N(a.Amount*6/10 + 1)
		if r.IntN(40) == 0 {
			n = a.Amount + 1 + r.Int64N(a.Amount)
		}
		d := a.Check(s, now, n)
		if h.check != nil {
			h.check(s, now, n, d)
		}
		switch op := r.IntN(10); {
		case op < 6 && d.OK():
			s = a.Admit(s, now, n)
			all = append(all, heldTicket{at: now, reserved: n, actual: -1})
			running = append(running, len(all)-1)
			if h.admit != nil {
				h.admit(now, n)
			}
		case op < 9 && len(running) > 0:
			i := r.IntN(len(running))
			tk := &all[running[i]]
			if refunds {
				tk.actual = []int64{-1, 0, tk.reserved, r.Int64N(2*tk.reserved + 1)}[r.IntN(4)]
			} else {
				tk.actual = []int64{-1, tk.reserved}[r.IntN(2)]
			}
			s = a.Release(s, now, tk.at, tk.reserved, tk.actual)
			running = append(running[:i], running[i+1:]...)
			if h.release != nil {
				h.release(now, *tk)
			}
		}
	}
	return all
}

// calendarModel is a calendar allowance as an exact model keeps it: what each window has counted,
// by its start, forever, each ticket reconciled in its admission's window.
type calendarModel struct {
	a    throttle.Allowance
	used map[time.Time]int64
}

func (m calendarModel) window(at time.Time) time.Time { s, _ := m.a.Window(at); return s.UTC() }

func (m calendarModel) check(now time.Time, n int64) throttle.Decision {
	n = max(0, n)
	if n > m.a.Amount {
		return throttle.Decision{Reason: throttle.ReasonAllowance}
	}
	if u := m.used[m.window(now)]; u < m.a.Amount && n <= m.a.Amount-u {
		return throttle.Decision{Reason: throttle.ReasonNone, RetryAt: now}
	}
	_, end := m.a.Window(now)
	return throttle.Decision{Reason: throttle.ReasonAllowance, RetryAt: end.UTC()}
}

func (m calendarModel) hooks(t *testing.T) hooks {
	return hooks{
		check: func(s throttle.AllowanceState, now time.Time, n int64, d throttle.Decision) {
			require.Equal(t, m.check(now, n), d, "at %v, %d", now, n)
			require.Equal(t, m.used[m.window(now)], m.a.Used(s, now), "at %v", now)
			requireRetryAt(t, m.a, s, now, n, d)
		},
		admit: func(now time.Time, n int64) { m.used[m.window(now)] += n },
		release: func(_ time.Time, h heldTicket) {
			if h.actual >= 0 {
				w := m.window(h.at)
				m.used[w] = max(0, m.used[w]+h.actual-h.reserved)
			}
		},
	}
}

// requireRetryAt checks that a refusal with a RetryAt lifts at it and not a millisecond before (if
// that is after now), nothing else changing.
func requireRetryAt(t *testing.T, a throttle.Allowance, s throttle.AllowanceState, now time.Time, n int64, d throttle.Decision) {
	t.Helper()
	if d.OK() || d.RetryAt.IsZero() {
		return
	}
	require.True(t, d.RetryAt.After(now), "RetryAt %v is after now %v", d.RetryAt, now)
	require.True(t, a.Check(s, d.RetryAt, n).OK(), "%s: %d refused at %v is admitted at its RetryAt %v", a, n, now, d.RetryAt)
	if before := d.RetryAt.Add(-time.Millisecond); before.After(now) {
		require.False(t, a.Check(s, before, n).OK(), "%s: %d refused at %v is refused until %v", a, n, now, d.RetryAt)
	}
}

// TestAllowance_CalendarMatchesModel: over random admissions and releases across days, the ends of
// months and daylight-saving changes, a calendar allowance decides exactly as the exact model does
// (calendarModel), a refusal lifts exactly at its RetryAt, and no window admits more than the amount.
func TestAllowance_CalendarMatchesModel(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		a       throttle.Allowance
		start   string
		maxStep time.Duration
	}{
		{calendar(throttle.CalendarDay, "America/Los_Angeles"), "2026-03-05T00:00:00Z", 2 * time.Hour},
		{calendar(throttle.CalendarDay, "America/Los_Angeles"), "2026-10-29T00:00:00Z", 2 * time.Hour},
		{calendar(throttle.CalendarHour, "America/Los_Angeles"), "2026-11-01T06:00:00Z", 5 * time.Minute},
		{calendar(throttle.CalendarDay, "Europe/Berlin"), "2026-03-26T00:00:00Z", 2 * time.Hour},
		{calendar(throttle.CalendarDay, "Europe/Berlin"), "2026-10-22T00:00:00Z", 2 * time.Hour},
		{calendar(throttle.CalendarWeek, "Europe/Berlin"), "2026-03-01T00:00:00Z", 12 * time.Hour},
		{calendar(throttle.CalendarMonth, ""), "2028-01-20T00:00:00Z", 24 * time.Hour},
		{calendar(throttle.CalendarMonth, "America/Los_Angeles"), "2026-11-15T00:00:00Z", 24 * time.Hour},
		{calendar(throttle.CalendarHour, "Australia/Lord_Howe"), "2026-04-04T12:00:00Z", 5 * time.Minute},
	} {
		t.Run(fmt.Sprintf("%d_%s", i, tc.a.Key()), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(28, uint64(i)))
			m := calendarModel{a: tc.a, used: map[time.Time]int64{}}
			all := stream(r, tc.a, utc(t, tc.start), tc.maxStep, 3000, true, m.hooks(t))
			perWindow := map[time.Time]int64{}
			for _, h := range all {
				perWindow[m.window(h.at)] += h.charge()
			}
			require.Greater(t, len(perWindow), 10, "the stream crosses many windows")
			for w, c := range perWindow {
				require.LessOrEqual(t, c, tc.a.Amount, "the window of %v", w)
			}
		})
	}
}

// TestAllowance_RollingNeverAboveTheAmount: over random admissions and releases, the tickets admitted
// in any window of the rolling duration are charged at most the amount in all (the bound
// AllowanceState documents), and a refusal lifts exactly at its RetryAt.
func TestAllowance_RollingNeverAboveTheAmount(t *testing.T) {
	t.Parallel()
	for i, d := range []time.Duration{24 * time.Hour, 90 * time.Minute, 7 * time.Second, 30 * 24 * time.Hour} {
		a := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 1000, Rolling: d}
		t.Run(a.Key(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(28, 100+uint64(i)))
			all := stream(r, a, t0.Add(time.Duration(r.Int64N(int64(d)))), d/20, 4000, true, hooks{
				check: func(s throttle.AllowanceState, now time.Time, n int64, dec throttle.Decision) {
					requireRetryAt(t, a, s, now, n, dec)
				},
			})
			require.Greater(t, all[len(all)-1].at.Sub(all[0].at), 20*d, "the stream runs many windows long")
			from := 0 // the first ticket in the window ending at all[j].at
			var sum int64
			for j, h := range all {
				sum += h.charge()
				for all[from].at.Before(h.at.Add(-d)) {
					sum -= all[from].charge()
					from++
				}
				require.LessOrEqual(t, sum, a.Amount, "the window [%v, %v] (tickets %d..%d)", h.at.Add(-d), h.at, from, j)
			}
		})
	}
}

// TestAllowance_RollingIsConservativeByOneSliceAtMost: with no refunds, a rolling allowance admits
// every ticket that an exact log of the admissions over the duration plus one slice would admit.
func TestAllowance_RollingIsConservativeByOneSliceAtMost(t *testing.T) {
	t.Parallel()
	for i, d := range []time.Duration{24 * time.Hour, 7 * time.Second} {
		a := throttle.Allowance{Meter: throttle.MeterTokens, Amount: 1000, Rolling: d}
		slice := time.Duration((d.Milliseconds()+throttle.RollingSlices-1)/throttle.RollingSlices) * time.Millisecond
		t.Run(a.Key(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(28, 200+uint64(i)))
			var log []heldTicket
			admitted, exactWouldAdmit := 0, 0
			stream(r, a, t0, d/20, 4000, false, hooks{
				check: func(_ throttle.AllowanceState, now time.Time, n int64, dec throttle.Decision) {
					var exact int64
					for _, h := range log {
						if h.at.After(now.Add(-d - slice)) {
							exact += h.reserved
						}
					}
					if exact < a.Amount && n <= a.Amount-exact {
						exactWouldAdmit++
						require.True(t, dec.OK(), "at %v, %d: %d in the last %v", now, n, exact, d+slice)
					}
					if dec.OK() {
						admitted++
					}
				},
				admit: func(now time.Time, n int64) { log = append(log, heldTicket{at: now, reserved: n}) },
			})
			require.Greater(t, exactWouldAdmit, 100)
			require.Greater(t, admitted, exactWouldAdmit, "it admits more than the exact log over one slice more")
		})
	}
}
