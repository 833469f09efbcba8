package admit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestRunTimes(t *testing.T) {
	t.Run("QuantilesInterpolate", func(t *testing.T) {
		r := admit.NewRunTimes([]time.Duration{ms(400), ms(100), ms(300), ms(200), ms(500)})
		require.Equal(t, admit.RunTimes{ms(100), ms(200), ms(300), ms(400), ms(500)}, r, "sorted")
		require.Equal(t, admit.Span{Low: ms(200), Mid: ms(300), High: ms(400)}, r.Typical())
		require.Equal(t, ms(100), r.Quantile(0))
		require.Equal(t, ms(500), r.Quantile(1))
		require.Equal(t, ms(150), r.Quantile(0.125))
		require.Zero(t, admit.RunTimes(nil).Typical().Mid, "no sample: not known")
	})

	t.Run("ALongTailDoesNotMoveTheMedian", func(t *testing.T) {
		// Nine runs of 500ms and one of 40 minutes: a mean would say 4.5 minutes.
		ds := []time.Duration{40 * time.Minute}
		for range 9 {
			ds = append(ds, ms(500))
		}
		require.Equal(t, ms(500), admit.NewRunTimes(ds).Typical().Mid)
	})

	t.Run("RemainingIsOfTheRunsThatLastedLonger", func(t *testing.T) {
		r := admit.NewRunTimes([]time.Duration{ms(100), ms(200), ms(1000), ms(3000)})
		s, ok := r.Remaining(ms(500))
		require.True(t, ok)
		// Past 500ms, the runs like it are those of 1s and 3s: 500ms to 2.5s still to go.
		require.Equal(t, admit.Span{Low: ms(1000), Mid: ms(1500), High: ms(2000)}, s)
		s, ok = r.Remaining(0)
		require.True(t, ok)
		require.Equal(t, r.Typical(), s, "a run that has just begun is a typical one")
	})

	t.Run("OverdueWhenNoRunLastedAsLong", func(t *testing.T) {
		r := admit.NewRunTimes([]time.Duration{ms(500), ms(600)})
		_, ok := r.Remaining(40 * time.Minute)
		require.False(t, ok, "40 minutes into a run whose like take 0.5s: its end cannot be told")
		_, ok = r.Remaining(ms(600))
		require.False(t, ok, "as long as the longest: none lasted longer")
		_, ok = admit.RunTimes(nil).Remaining(0)
		require.False(t, ok)
	})

	t.Run("NegativeRunTimesCountAsZero", func(t *testing.T) {
		require.Equal(t, admit.RunTimes{0, ms(5)}, admit.NewRunTimes([]time.Duration{ms(5), -ms(3)}))
	})
}

// A holder past every recent run: its release is its deadline at the latest, or, with no deadline,
// not known; either way the explanation counts it as overdue, and never says "in 488ms".
func TestExplain_OverdueHolder(t *testing.T) {
	l := throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1}
	since := t0.Add(-40 * time.Minute)
	in := admit.ExplainInput{
		Ticket: admit.Candidate{ID: 5, LimitKeys: []string{"tenant:acme"}},
		Limits: map[string]admit.LimitState{"tenant:acme": {Limit: l, State: running(1, 0)}},
		Standing: map[string]admit.Standing{"tenant:acme": {
			Releases: []admit.Release{{At: t0.Add(20 * time.Minute), Early: t0, Late: t0.Add(20 * time.Minute), Since: since}},
			RunTime:  exactly(ms(500)),
		}},
		Now: t0,
	}
	e := admit.Explain(in)
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, t0.Add(20*time.Minute), e.Estimate, "by its deadline at the latest")
	require.Equal(t, t0, e.EstimateLow, "it may end any moment")
	require.Equal(t, t0.Add(20*time.Minute), e.EstimateHigh)
	require.Equal(t, 1, e.Limits[0].Overdue)
	require.Equal(t, since, e.Limits[0].OverdueSince)
	require.Zero(t, e.Limits[0].OverdueOpen, "it has a deadline")

	in.Standing["tenant:acme"] = admit.Standing{Releases: []admit.Release{{Since: since}}, RunTime: exactly(ms(500))}
	e = admit.Explain(in)
	require.True(t, e.Estimate.IsZero())
	require.Contains(t, e.Unknown, "has run longer than every recent run on the limit")
	require.Contains(t, e.Unknown, "no deadline")
	require.Equal(t, 1, e.Limits[0].OverdueOpen, "no deadline: its end cannot be told")
}

// The range: runs of 1s to 3s (median 2s) ahead of the ticket on a cap of 1.
func TestExplain_Range(t *testing.T) {
	l := throttle.Limit{Key: "k", MaxConcurrent: 1}
	e := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 3, LimitKeys: []string{"k"}},
		Limits: map[string]admit.LimitState{"k": {Limit: l, State: running(1, 0)}},
		Standing: map[string]admit.Standing{"k": {
			Ahead: []throttle.Cost{{}}, AheadCount: 1,
			Releases: []admit.Release{{At: t0.Add(2 * time.Second), Early: t0.Add(time.Second), Late: t0.Add(3 * time.Second)}},
			RunTime:  admit.Span{Low: time.Second, Mid: 2 * time.Second, High: 3 * time.Second},
		}},
		Now: t0,
	})
	// The holder ends at 1/2/3s; the one ahead then runs 1/2/3s.
	require.Equal(t, t0.Add(4*time.Second), e.Estimate)
	require.Equal(t, t0.Add(2*time.Second), e.EstimateLow)
	require.Equal(t, t0.Add(6*time.Second), e.EstimateHigh)
	require.Equal(t, e.Estimate, e.Limits[0].ReadyAt)

	// A rate's wait has no run time in it: the range is the point.
	r := admit.Explain(admit.ExplainInput{
		Ticket: admit.Candidate{ID: 1, LimitKeys: []string{"email"}},
		Limits: map[string]admit.LimitState{"email": {Limit: throttle.Limit{Key: "email", RequestsPerSecond: 1, Burst: 1},
			State: throttle.State{Requests: throttle.Bucket{Level: 1, At: t0}}}},
		Standing: map[string]admit.Standing{"email": {Ahead: []throttle.Cost{{}}, AheadCount: 1}},
		Now:      t0,
	})
	require.Equal(t, t0.Add(time.Second), r.Estimate)
	require.Equal(t, r.Estimate, r.EstimateLow)
	require.Equal(t, r.Estimate, r.EstimateHigh)
}

// Tickets ahead that another of their limits holds back keep the ticket's place in line but are not
// played: a full tenant's tickets do not stand before a ticket of another tenant on the provider.
func TestExplain_AheadHeldElsewhere(t *testing.T) {
	l := throttle.Limit{Key: "openai", MaxConcurrent: 10}
	in := admit.ExplainInput{
		Ticket:   admit.Candidate{ID: 7, LimitKeys: []string{"openai", "tenant:b"}},
		Limits:   map[string]admit.LimitState{"openai": {Limit: l}, "tenant:b": {Limit: throttle.Limit{Key: "tenant:b", MaxConcurrent: 1}}},
		Standing: map[string]admit.Standing{"openai": {AheadCount: 2, HeldElsewhere: 2}},
		Now:      t0,
	}
	e := admit.Explain(in)
	require.Equal(t, 3, e.Place)
	require.Equal(t, throttle.WaitNothing, e.WaitsFor, "both ahead wait for tenant:acme: the next claim admits this one")
	require.Equal(t, 0, e.Limits[0].Ahead)
	require.Equal(t, 2, e.Limits[0].HeldElsewhere)
	require.Equal(t, t0, e.Estimate)
}
