package words_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

var t0 = time.Date(2026, 12, 7, 2, 54, 37, 0, time.UTC)

// acme is an explanation by admit.Explain of ticket 9, in openai's line behind ahead tickets that
// tenant:acme holds back, waiting for tenant:acme (1 slot), whose one holder was admitted at since
// and has run longer than every recent 2-minute run; its deadline is deadline (zero: none).
func acme(t *testing.T, since, deadline time.Time, holders int) throttle.Explanation {
	t.Helper()
	var rs []admit.Release
	for i := range holders {
		rs = append(rs, admit.Release{Since: since.Add(time.Duration(i) * time.Minute), Cost: throttle.Cost{Input: 10}})
		if !deadline.IsZero() {
			rs[i].At, rs[i].Early, rs[i].Late = deadline, t0, deadline
		}
	}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 9, LimitKeys: []string{"openai", "tenant:acme"}, Cost: 10},
		Limits: map[string]admit.LimitState{
			"openai":      {Limit: throttle.Limit{Key: "openai", MaxConcurrent: 10}},
			"tenant:acme": {Limit: throttle.Limit{Key: "tenant:acme", MaxConcurrent: holders}, State: throttle.State{InflightCount: holders}},
		},
		Standing: map[string]admit.Standing{
			"tenant:acme": {Releases: rs, RunTime: admit.Span{Low: time.Minute, Mid: 2 * time.Minute, High: 3 * time.Minute}},
		},
		Now: t0,
	})
	require.Equal(t, "concurrency", e.WaitsFor)
	return e
}

// A holder that has run longer than every recent run is said to have been running since its
// admission, for how long; expected by its deadline, or, with none, of unknown end.
func TestOverdue(t *testing.T) {
	t.Parallel()
	since := t0.Add(-40 * time.Minute)
	for _, c := range []struct {
		name     string
		deadline time.Time
		holders  int
		want     string
	}{
		{"ByItsDeadline", t0.Add(20 * time.Minute), 1, "1 ticket holding it has been running since 02:14:37 UTC (40m0s), longer than any " +
			"recent run, so it is expected to end by its deadline at the latest"},
		{"NoDeadline", time.Time{}, 1, "1 ticket holding it has been running since 02:14:37 UTC (40m0s), longer than any recent run, " +
			"and has no deadline, so when it ends is not known"},
		{"Several", t0.Add(20 * time.Minute), 2, "2 tickets holding it have been running longer than any recent run, the longest since " +
			"02:14:37 UTC (40m0s), so they are expected to end by their deadlines at the latest"},
		{"SeveralNoDeadline", time.Time{}, 2, "2 tickets holding it have been running longer than any recent run, the longest since " +
			"02:14:37 UTC (40m0s), and not every one has a deadline, so when they end is not known"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := acme(t, since, c.deadline, c.holders)
			l := e.Limits[1]
			require.Equal(t, c.want, words.Overdue(l, e.Now))
			require.Equal(t, "waits for concurrency of tenant:acme ("+words.Grouped(int64(c.holders))+"/"+words.Grouped(int64(c.holders))+
				" in flight); "+c.want, words.Holds(e, pgqueue.Ticket{ID: 9}))
		})
	}
	require.Empty(t, words.Overdue(throttle.LimitWait{Key: "openai"}, t0), "no holder overdue")
	yesterday := words.Overdue(throttle.LimitWait{Overdue: 1, OverdueSince: t0.Add(-25 * time.Hour), ReadyAt: t0}, t0)
	require.Equal(t, "1 ticket holding it has been running since 2026-12-06 01:54:37 UTC (25h0m0s), longer than any recent run, "+
		"so it is expected to end by its deadline at the latest", yesterday, "another day: with its date")
}

// A ticket nothing holds, with tickets before it in its line that other limits hold back, says so,
// rather than that none is ahead of it beside a place that says otherwise.
func TestHolds_Nothing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		held int
		want string
	}{
		{0, "nothing holds it: every limit has room, and no ticket is ahead of it; the next claim admits it"},
		{1, "nothing holds it: every limit has room, and the ticket before it in openai waits for other limits; the next claim admits it"},
		{2, "nothing holds it: every limit has room, and the 2 tickets before it in openai wait for other limits; the next claim admits it"},
		{2000, "nothing holds it: every limit has room, and the 2,000 tickets before it in openai wait for other limits; the next claim admits it"},
	} {
		e := admit.Explain(admit.ExplainInput{
			Ticket:   admit.Candidate{ID: 9, LimitKeys: []string{"openai"}, Cost: 10},
			Limits:   map[string]admit.LimitState{"openai": {Limit: throttle.Limit{Key: "openai", MaxConcurrent: 10}}},
			Standing: map[string]admit.Standing{"openai": {AheadCount: c.held, HeldElsewhere: c.held}},
			Now:      t0,
		})
		require.Equal(t, throttle.WaitNothing, e.WaitsFor)
		require.Equal(t, c.held+1, e.Place)
		require.Equal(t, c.want, words.Holds(e, pgqueue.Ticket{ID: 9}), "%d held elsewhere", c.held)
	}
}

// A ticket that is not queued says what became of it: a finished one how it finished, in words, and
// one handed back to Temporal as which attempt, and what a retry takes.
func TestSettled(t *testing.T) {
	t.Parallel()
	enq, adm, fin := t0.Add(-time.Minute), t0.Add(-50*time.Second), t0
	admitted := "admitted at 2026-12-07 02:53:47 UTC after waiting 10s"
	for _, c := range []struct {
		name string
		t    pgqueue.Ticket
		want string
	}{
		{"Completed", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin, OutcomeKind: pgqueue.OutcomeCompleted},
			"finished at 2026-12-07 02:54:37 UTC with a result, " + admitted + "; its outcome waits to be delivered to Temporal"},
		{"Failed", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin, OutcomeKind: pgqueue.OutcomeFailed},
			"finished at 2026-12-07 02:54:37 UTC with a failure, " + admitted + "; its outcome waits to be delivered to Temporal"},
		{"Canceled", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin, OutcomeKind: pgqueue.OutcomeCanceled},
			"finished at 2026-12-07 02:54:37 UTC, canceled, " + admitted + "; its outcome waits to be delivered to Temporal"},
		{"HandedBack", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin, OutcomeKind: pgqueue.OutcomeHandedBack},
			"finished at 2026-12-07 02:54:37 UTC, handed back as a retryable failure (its owner stopped before running it to the end), " + admitted +
				"; its outcome waits to be delivered to Temporal"},
		{"NeverAdmitted", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, FinishedAt: fin, OutcomeKind: pgqueue.OutcomeHandedBack},
			"finished at 2026-12-07 02:54:37 UTC, handed back as a retryable failure (its owner stopped before running it to the end), never admitted" +
				"; its outcome waits to be delivered to Temporal"},
		{"UnknownKind", pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin, OutcomeKind: "result"},
			"finished at 2026-12-07 02:54:37 UTC (result), " + admitted + "; its outcome waits to be delivered to Temporal"},
		{"Returned", pgqueue.Ticket{State: pgqueue.TicketStateReturned, Attempt: 3, EnqueuedAt: enq, AdmittedAt: adm, FinishedAt: fin},
			"handed back to Temporal at 2026-12-07 02:54:37 UTC as attempt 3: Temporal retries it only if its retry policy allows more than 3 " +
				"attempts, and the retry then takes this ticket's place in line"},
		{"Running", pgqueue.Ticket{State: pgqueue.TicketStateRunning, EnqueuedAt: enq, AdmittedAt: adm},
			admitted + "; running, it holds its limits until it finishes"},
		{"Admitted", pgqueue.Ticket{State: pgqueue.TicketStateAdmitted, Owner: "w1", EnqueuedAt: enq, AdmittedAt: adm},
			admitted + "; it holds its limits while its owner (w1) starts it"},
	} {
		require.Equal(t, c.want, words.Settled(c.t), c.name)
	}
}

// The expected admission and a limit's ready time give their likely range when recent runs vary.
func TestExpectedAndReady(t *testing.T) {
	t.Parallel()
	e := acme(t, t0.Add(-40*time.Minute), t0.Add(20*time.Minute), 1)
	require.Equal(t, "in 20m0s (at 03:14:37 UTC) (likely now to 20m0s, as recent runs vary)", words.Expected(e))
	require.Equal(t, words.Expected(e), words.Ready(e.Limits[1], e.Now), "tenant:acme sets the estimate")
	require.Equal(t, "now", words.Ready(e.Limits[0], e.Now))
	require.Equal(t, "yes", words.Room(e.Limits[0]))
	require.Equal(t, "concurrency", words.Room(e.Limits[1]))
	open := acme(t, t0.Add(-40*time.Minute), time.Time{}, 1)
	require.Equal(t, "not known", words.Ready(open.Limits[1], open.Now))
	require.Regexp(t, `^not known: tenant:acme: .*no deadline`, words.Expected(open))
}

// A refusal names the allowance and its limit, in the words of what holds a ticket, and when it
// resets, in UTC stamps (and on the allowance's zone's clock).
func TestRefusal(t *testing.T) {
	t.Parallel()
	day := throttle.Allowance{Meter: throttle.MeterRequests, Amount: 1, Calendar: "day", Zone: "America/Los_Angeles"}
	reset := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 9, LimitKeys: []string{"plan:free"}, Deadline: t0.Add(time.Hour)},
		Limits: map[string]admit.LimitState{"plan:free": {Limit: throttle.Limit{Key: "plan:free", Allowances: []throttle.Allowance{day}},
			State: throttle.State{Allowances: throttle.AllowanceStates{day.Key(): {Start: reset.Add(-24 * time.Hour), Used: 1}}}}},
		Now: t0,
	})
	require.NotNil(t, e.Refused, "its deadline comes before the reset")
	require.Equal(t, "it will be refused: allowance requests=1/day@America/Los_Angeles of plan:free: used 1 request of 1 request, needs "+
		"1 request; resets 08:00:00 UTC (in 5h5m23s); the next claim fails its activity (its deadline, 03:54:37 UTC, comes before the reset)",
		words.Refused(e, pgqueue.Ticket{ID: 9}))
	sp := *e.Refused
	r := pgqueue.Refusal{Limit: "plan:free", Spent: sp}
	ticket := pgqueue.Ticket{State: pgqueue.TicketStateFinished, EnqueuedAt: t0, FinishedAt: t0, OutcomeKind: pgqueue.OutcomeRefused}
	ticket.Outcome, _ = json.Marshal(r)
	require.Equal(t, "refused at 2026-12-07 02:54:37 UTC, never admitted: allowance requests=1/day@America/Los_Angeles of plan:free was spent: "+
		"used 1 request of 1 request, the call needed 1 request; it resets at 2026-12-07 08:00:00 UTC (2026-12-07 00:00 PST), after the "+
		"call's deadline, 2026-12-07 03:54:37 UTC; the refusal waits to be delivered to Temporal", words.Settled(ticket))
}
