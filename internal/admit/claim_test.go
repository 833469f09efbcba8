package admit_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// heldLimits is the claim's locked limits, each with its defaults filled in and an idle state.
func heldLimits(ls ...throttle.Limit) map[string]admit.LimitState {
	out := map[string]admit.LimitState{}
	for _, l := range ls {
		out[l.Key] = admit.LimitState{Limit: l.WithDefaults()}
	}
	return out
}

// cand is a candidate drawing on keys, its line's first.
func cand(id int64, keys ...string) admit.Candidate {
	return admit.Candidate{ID: id, LimitKeys: keys}
}

// costing is c reserving cost tokens.
func costing(c admit.Candidate, cost int64) admit.Candidate { c.Cost = cost; return c }

func admittedIDs(d admit.ClaimDecision) []int64 {
	var out []int64
	for _, a := range d.Admitted {
		out = append(out, a.ID)
	}
	return out
}

// waitsFor is the waits of ids, all for key and r.
func waitsFor(key string, r throttle.Reason, ids ...int64) []admit.Wait {
	var out []admit.Wait
	for _, id := range ids {
		out = append(out, admit.Wait{ID: id, Key: key, Reason: r})
	}
	return out
}

// lockRecorder is a LockFunc that grants the limits in grant (others are held elsewhere) at the
// instant at, and records what it was asked.
type lockRecorder struct {
	grant map[string]admit.LimitState
	at    time.Time
	err   error
	calls [][]string
}

func (r *lockRecorder) lock(keys []string) (map[string]admit.LimitState, time.Time, error) {
	r.calls = append(r.calls, keys)
	if r.err != nil {
		return nil, time.Time{}, r.err
	}
	got := map[string]admit.LimitState{}
	for _, k := range keys {
		if ls, ok := r.grant[k]; ok {
			got[k] = ls
		}
	}
	if len(got) == 0 {
		return nil, time.Time{}, nil
	}
	return got, r.at, nil
}

func decide(t *testing.T, p admit.ClaimPage) admit.ClaimDecision {
	t.Helper()
	d, err := admit.DecideClaim(p)
	require.NoError(t, err)
	return d
}

func TestDecideClaim(t *testing.T) {
	t.Parallel()

	t.Run("AdmitsInLineOrderUntilTheLineIsFull", func(t *testing.T) {
		t.Parallel()
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 2}),
			Candidates: []admit.Candidate{cand(1, "k"), cand(2, "k"), cand(3, "k")},
			Now:        t0, Budget: 10,
		})
		require.Equal(t, []admit.Admission{{ID: 1, At: t0}, {ID: 2, At: t0}}, d.Admitted)
		require.Equal(t, throttle.ReasonConcurrency, d.Blocked)
		require.Equal(t, waitsFor("k", throttle.ReasonConcurrency, 3), d.Waits)
		require.True(t, d.RetryAt.IsZero(), "only a release unblocks concurrency")
		require.Equal(t, map[string]throttle.State{"k": {InflightCount: 2}}, d.States)
		require.Empty(t, d.Expired)
		require.False(t, d.Busy)
		require.Equal(t, t0, d.Now)
	})

	t.Run("RateBlocksTheHeadUntilItRefills", func(t *testing.T) {
		t.Parallel()
		limits := heldLimits(throttle.Limit{Key: "k", RequestsPerSecond: 2, Burst: 3})
		cands := []admit.Candidate{cand(1, "k"), cand(2, "k"), cand(3, "k"), cand(4, "k"), cand(5, "k")}
		d := decide(t, admit.ClaimPage{Line: "k", Limits: limits, Candidates: cands, Now: t0, Budget: 10})
		require.Equal(t, []int64{1, 2, 3}, admittedIDs(d), "the burst")
		require.Equal(t, throttle.ReasonRate, d.Blocked)
		require.Equal(t, t0.Add(500*time.Millisecond), d.RetryAt)
		require.Equal(t, waitsFor("k", throttle.ReasonRate, 4, 5), d.Waits)

		// Fed back half a second later, the bucket has one request again.
		l := limits["k"]
		l.State = d.States["k"]
		limits["k"] = l
		now := t0.Add(500 * time.Millisecond)
		d = decide(t, admit.ClaimPage{Line: "k", Limits: limits, Candidates: cands[3:], Now: now, Budget: 10})
		require.Equal(t, []admit.Admission{{ID: 4, At: now}}, d.Admitted)
		require.Equal(t, t0.Add(time.Second), d.RetryAt)
	})

	t.Run("HeadWaitsForItsOwnLimit", func(t *testing.T) {
		t.Parallel()
		// 600 tokens a minute: 10 a second, bucket of 600.
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", TokensPerMinute: 600}),
			Candidates: []admit.Candidate{costing(cand(1, "k"), 500), costing(cand(2, "k"), 500), costing(cand(3, "k"), 50)},
			Now:        t0, Budget: 10,
		})
		require.Equal(t, []int64{1}, admittedIDs(d), "the small ticket does not jump the large one waiting at the head")
		require.Equal(t, throttle.ReasonTokens, d.Blocked)
		require.Equal(t, t0.Add(40*time.Second), d.RetryAt, "400 more tokens at 10/s")
		require.Equal(t, waitsFor("k", throttle.ReasonTokens, 2, 3), d.Waits)
		require.Equal(t, 100.0, d.States["k"].Tokens.Level)
	})

	t.Run("FullTenantIsPassedOver", func(t *testing.T) {
		t.Parallel()
		d := decide(t, admit.ClaimPage{
			Line: "openai",
			Limits: heldLimits(throttle.Limit{Key: "openai", MaxConcurrent: 10, TokensPerMinute: 60},
				throttle.Limit{Key: "tenant:a", MaxConcurrent: 1}, throttle.Limit{Key: "tenant:b", MaxConcurrent: 1}),
			Candidates: []admit.Candidate{
				costing(cand(1, "openai", "tenant:a"), 5), costing(cand(2, "openai", "tenant:a"), 5), costing(cand(3, "openai", "tenant:b"), 5),
			},
			Now: t0, Budget: 10,
		})
		require.Equal(t, []int64{1, 3}, admittedIDs(d), "a full tenant is passed over, not a stall for the line")
		require.Equal(t, throttle.ReasonNone, d.Blocked)
		require.Equal(t, waitsFor("tenant:a", throttle.ReasonConcurrency, 2), d.Waits)
		require.Equal(t, throttle.State{InflightCount: 2, InflightTokens: 10, Tokens: throttle.Bucket{Level: 50, At: t0}}, d.States["openai"])
		require.Equal(t, throttle.State{InflightCount: 1, InflightTokens: 5}, d.States["tenant:a"])
		require.Equal(t, throttle.State{InflightCount: 1, InflightTokens: 5}, d.States["tenant:b"])
	})

	t.Run("PassedOverTicketKeepsTheEarliestRetry", func(t *testing.T) {
		t.Parallel()
		d := decide(t, admit.ClaimPage{
			Line: "k",
			Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10},
				throttle.Limit{Key: "slow", RequestsPerSecond: 1}, throttle.Limit{Key: "fast", RequestsPerSecond: 4, Burst: 1}),
			Candidates: []admit.Candidate{cand(1, "k", "slow"), cand(2, "k", "slow"), cand(3, "k", "fast"), cand(4, "k", "fast")},
			Now:        t0, Budget: 10,
		})
		require.Equal(t, []int64{1, 3}, admittedIDs(d))
		require.Equal(t, []admit.Wait{{ID: 2, Key: "slow", Reason: throttle.ReasonRate}, {ID: 4, Key: "fast", Reason: throttle.ReasonRate}}, d.Waits)
		require.Equal(t, t0.Add(250*time.Millisecond), d.RetryAt)
		require.Equal(t, throttle.ReasonNone, d.Blocked)
	})

	t.Run("ExpiresTicketsNearTheirDeadline", func(t *testing.T) {
		t.Parallel()
		at := func(id int64, deadline time.Duration) admit.Candidate {
			c := cand(id, "k")
			c.Deadline = t0.Add(deadline)
			return c
		}
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}),
			Candidates: []admit.Candidate{
				at(1, 0), at(2, time.Second), at(3, time.Minute), at(4, 5*time.Second), at(5, 5*time.Second+time.Microsecond), cand(6, "k"),
			},
			Now: t0, MinRemaining: 5 * time.Second, Budget: 2,
		})
		require.Equal(t, []int64{1, 2, 4}, d.Expired, "a deadline at or within MinRemaining expires")
		require.Equal(t, []int64{3, 5}, admittedIDs(d), "expired tickets spend no budget")
		require.Empty(t, d.Waits)
	})

	t.Run("NotBeforeHoldsATicketBack", func(t *testing.T) {
		t.Parallel()
		later, due := cand(1, "k"), cand(2, "k")
		later.NotBefore, due.NotBefore = t0.Add(time.Minute), t0
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}),
			Candidates: []admit.Candidate{later, due, cand(3, "k")}, Now: t0, Budget: 10,
		})
		require.Equal(t, []int64{2, 3}, admittedIDs(d), "a not-before time that has come does not hold back")
		require.Equal(t, t0.Add(time.Minute), d.RetryAt)
		require.Empty(t, d.Waits, "a not-before time is not a limit's wait")
		require.Equal(t, throttle.ReasonNone, d.Blocked)
	})

	t.Run("PausedLineWaitsUntilThePauseEnds", func(t *testing.T) {
		t.Parallel()
		limits := heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10})
		limits["k"] = admit.LimitState{Limit: limits["k"].Limit, State: throttle.State{PausedUntil: t0.Add(30 * time.Second)}}
		page := admit.ClaimPage{Line: "k", Limits: limits, Candidates: []admit.Candidate{cand(1, "k")}, Now: t0, Budget: 10}
		d := decide(t, page)
		require.Empty(t, d.Admitted)
		require.Equal(t, throttle.ReasonPaused, d.Blocked)
		require.Equal(t, t0.Add(30*time.Second), d.RetryAt)
		page.Now = t0.Add(30 * time.Second)
		require.Equal(t, []int64{1}, admittedIDs(decide(t, page)))
	})

	t.Run("BudgetBoundsAdmissions", func(t *testing.T) {
		t.Parallel()
		var cands []admit.Candidate
		for id := range int64(7) {
			cands = append(cands, cand(id, "k"))
		}
		page := admit.ClaimPage{Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 100}), Candidates: cands, Now: t0, Budget: 5}
		d := decide(t, page)
		require.Equal(t, []int64{0, 1, 2, 3, 4}, admittedIDs(d))
		require.Equal(t, throttle.ReasonNone, d.Blocked, "a spent budget blocks nothing")
		require.Empty(t, d.Waits)
		page.Budget = 0
		require.Empty(t, decide(t, page).Admitted)
	})

	t.Run("LocksOtherLimitsAsTheyAreReachedAndReadsTheClockAgain", func(t *testing.T) {
		t.Parallel()
		lock := &lockRecorder{grant: heldLimits(throttle.Limit{Key: "tenant:a", MaxConcurrent: 5}), at: t0.Add(time.Millisecond)}
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}), Lock: lock.lock,
			Candidates: []admit.Candidate{cand(1, "k"), cand(2, "k", "tenant:a"), cand(3, "tenant:a", "k")},
			Now:        t0, Budget: 10,
		})
		require.Equal(t, [][]string{{"tenant:a"}}, lock.calls, "each limit is locked once, when first needed")
		require.Equal(t, []admit.Admission{{ID: 1, At: t0}, {ID: 2, At: t0.Add(time.Millisecond)}, {ID: 3, At: t0.Add(time.Millisecond)}}, d.Admitted)
		require.Equal(t, t0.Add(time.Millisecond), d.Now)
		require.Equal(t, throttle.State{InflightCount: 2}, d.States["tenant:a"])
	})

	t.Run("LocksNothingForTicketsItDoesNotReach", func(t *testing.T) {
		t.Parallel()
		lock := &lockRecorder{grant: heldLimits(throttle.Limit{Key: "a", MaxConcurrent: 5}, throttle.Limit{Key: "b", MaxConcurrent: 5},
			throttle.Limit{Key: "c", MaxConcurrent: 5}, throttle.Limit{Key: "d", MaxConcurrent: 5}), at: t0}
		gone, notYet := cand(2, "k", "b"), cand(3, "k", "c")
		gone.Deadline, notYet.NotBefore = t0, t0.Add(time.Second)
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 1}), Lock: lock.lock,
			Candidates: []admit.Candidate{cand(1, "k"), gone, notYet, cand(4, "k", "a"), cand(5, "k", "d")},
			Now:        t0, Budget: 10,
		})
		require.Equal(t, []int64{1}, admittedIDs(d))
		require.Equal(t, []int64{2}, d.Expired)
		require.Equal(t, throttle.ReasonConcurrency, d.Blocked)
		require.Equal(t, [][]string{{"a"}}, lock.calls,
			"the head's limits are locked before they are checked; expired, not-yet and blocked tickets lock nothing")
		require.Equal(t, waitsFor("k", throttle.ReasonConcurrency, 4, 5), d.Waits)
	})

	t.Run("LimitHeldElsewhereSkipsTheTicket", func(t *testing.T) {
		t.Parallel()
		lock := &lockRecorder{grant: heldLimits(throttle.Limit{Key: "tenant:a", MaxConcurrent: 5}), at: t0.Add(time.Second)}
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}), Lock: lock.lock,
			Unavailable: map[string]bool{"tenant:c": true},
			Candidates: []admit.Candidate{
				cand(1, "k", "tenant:b"), cand(2, "k", "tenant:c"), cand(3, "k"), cand(4, "k", "tenant:b", "tenant:a"), cand(5, "k", "tenant:b"),
			},
			Now: t0, Budget: 10,
		})
		require.Equal(t, []admit.Admission{{ID: 3, At: t0}}, d.Admitted)
		require.True(t, d.Busy)
		require.Equal(t, []string{"tenant:b"}, d.Unavailable, "only the newly found")
		require.Equal(t, [][]string{{"tenant:b"}, {"tenant:a"}}, lock.calls,
			"a limit held elsewhere is not asked for again, and the others of a ticket are locked all the same")
		require.Equal(t, t0.Add(time.Second), d.Now, "the clock is read again after a new lock")
		require.Empty(t, d.Waits)
		require.NotContains(t, d.States, "tenant:a", "nothing was admitted on it")
	})

	t.Run("NilLockLocksNothing", func(t *testing.T) {
		t.Parallel()
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}),
			Candidates: []admit.Candidate{cand(1, "k", "t"), cand(2, "k")}, Now: t0, Budget: 10,
		})
		require.Equal(t, []int64{2}, admittedIDs(d))
		require.True(t, d.Busy)
		require.Equal(t, []string{"t"}, d.Unavailable)
	})

	t.Run("LockErrorStopsTheDecision", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		lock := &lockRecorder{err: boom}
		d, err := admit.DecideClaim(admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10}), Lock: lock.lock,
			Candidates: []admit.Candidate{cand(1, "k"), cand(2, "k", "t"), cand(3, "k")}, Now: t0, Budget: 10,
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, []int64{1}, admittedIDs(d), "what was decided before the error")
	})

	t.Run("VirtualTimeMovesUpToTheLastStart", func(t *testing.T) {
		t.Parallel()
		tagged := func(id int64, start float64) admit.Candidate { c := cand(id, "k"); c.VStart = start; return c }
		page := admit.ClaimPage{
			Line: "k", Limits: heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 3}), VTime: 5,
			Candidates: []admit.Candidate{tagged(1, 3), tagged(2, 7), tagged(3, 6), tagged(4, 9)}, Now: t0, Budget: 10,
		}
		require.Equal(t, 7.0, decide(t, page).VTime, "the blocked ticket at 9 does not move it")
		page.Candidates = page.Candidates[:1]
		require.Equal(t, 5.0, decide(t, page).VTime, "virtual time never goes back")
	})

	t.Run("DoesNotModifyItsInput", func(t *testing.T) {
		t.Parallel()
		limits := heldLimits(throttle.Limit{Key: "k", MaxConcurrent: 10, TokensPerMinute: 600})
		unavailable := map[string]bool{"x": true}
		lock := &lockRecorder{grant: heldLimits(throttle.Limit{Key: "t", MaxConcurrent: 5}), at: t0.Add(time.Second)}
		wantLimits, wantUnavailable := maps.Clone(limits), maps.Clone(unavailable)
		d := decide(t, admit.ClaimPage{
			Line: "k", Limits: limits, Unavailable: unavailable, Lock: lock.lock,
			Candidates: []admit.Candidate{costing(cand(1, "k", "t"), 100), cand(2, "k", "u"), cand(3, "k", "x")}, Now: t0, Budget: 10,
		})
		require.Equal(t, []int64{1}, admittedIDs(d))
		require.Equal(t, wantLimits, limits)
		require.Equal(t, wantUnavailable, unavailable)
	})
}
