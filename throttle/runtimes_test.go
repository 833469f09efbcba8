package throttle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/throttle"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestRunTimes(t *testing.T) {
	t.Run("QuantilesInterpolate", func(t *testing.T) {
		r := throttle.NewRunTimes([]time.Duration{ms(400), ms(100), ms(300), ms(200), ms(500)})
		require.Equal(t, throttle.RunTimes{ms(100), ms(200), ms(300), ms(400), ms(500)}, r, "sorted")
		require.Equal(t, throttle.Span{Low: ms(200), Mid: ms(300), High: ms(400)}, r.Typical())
		require.Equal(t, ms(100), r.Quantile(0))
		require.Equal(t, ms(500), r.Quantile(1))
		require.Equal(t, ms(150), r.Quantile(0.125))
		require.Zero(t, throttle.RunTimes(nil).Typical().Mid, "no sample: not known")
	})

	t.Run("ALongTailDoesNotMoveTheMedian", func(t *testing.T) {
		// Nine runs of 500ms and one of 40 minutes: a mean would say 4.5 minutes.
		ds := []time.Duration{40 * time.Minute}
		for range 9 {
			ds = append(ds, ms(500))
		}
		require.Equal(t, ms(500), throttle.NewRunTimes(ds).Typical().Mid)
	})

	t.Run("RemainingIsOfTheRunsThatLastedLonger", func(t *testing.T) {
		r := throttle.NewRunTimes([]time.Duration{ms(100), ms(200), ms(1000), ms(3000)})
		s, ok := r.Remaining(ms(500))
		require.True(t, ok)
		// Past 500ms, the runs like it are those of 1s and 3s: 500ms to 2.5s still to go.
		require.Equal(t, throttle.Span{Low: ms(1000), Mid: ms(1500), High: ms(2000)}, s)
		s, ok = r.Remaining(0)
		require.True(t, ok)
		require.Equal(t, r.Typical(), s, "a run that has just begun is a typical one")
	})

	t.Run("OverdueWhenNoRunLastedAsLong", func(t *testing.T) {
		r := throttle.NewRunTimes([]time.Duration{ms(500), ms(600)})
		_, ok := r.Remaining(40 * time.Minute)
		require.False(t, ok, "40 minutes into a run whose like take 0.5s: its end cannot be told")
		_, ok = r.Remaining(ms(600))
		require.False(t, ok, "as long as the longest: none lasted longer")
		_, ok = throttle.RunTimes(nil).Remaining(0)
		require.False(t, ok)
	})

	t.Run("NegativeRunTimesCountAsZero", func(t *testing.T) {
		require.Equal(t, throttle.RunTimes{0, ms(5)}, throttle.NewRunTimes([]time.Duration{ms(5), -ms(3)}))
	})
}

// A holder past every recent run: its release is its deadline at the latest, or, with no deadline,
// not known; either way the explanation counts it as overdue, and never says "in 488ms".
func TestExplain_OverdueHolder(t *testing.T) {
	l := throttle.Limit{Key: "tenant:acme", MaxConcurrent: 1}
	since := t0.Add(-40 * time.Minute)
	in := throttle.ExplainInput{
		Ticket: throttle.Candidate{ID: 5, LimitKeys: []string{"tenant:acme"}},
		Limits: map[string]throttle.LimitState{"tenant:acme": {Limit: l, State: running(1, 0)}},
		Standing: map[string]throttle.Standing{"tenant:acme": {
			Releases: []throttle.Release{{At: t0.Add(20 * time.Minute), Early: t0, Late: t0.Add(20 * time.Minute), Since: since}},
			RunTime:  exactly(ms(500)),
		}},
		Now: t0,
	}
	e := throttle.Explain(in)
	require.Equal(t, "concurrency", e.WaitsFor)
	require.Equal(t, t0.Add(20*time.Minute), e.Estimate, "by its deadline at the latest")
	require.Equal(t, t0, e.EstimateLow, "it may end any moment")
	require.Equal(t, t0.Add(20*time.Minute), e.EstimateHigh)
	require.Equal(t, 1, e.Limits[0].Overdue)
	require.Equal(t, since, e.Limits[0].OverdueSince)

	in.Standing["tenant:acme"] = throttle.Standing{Releases: []throttle.Release{{Since: since}}, RunTime: exactly(ms(500))}
	e = throttle.Explain(in)
	require.True(t, e.Estimate.IsZero())
	require.Contains(t, e.Unknown, "has run longer than every recent run on the limit")
	require.Contains(t, e.Unknown, "no deadline")
}

// The range: runs of 1s to 3s (median 2s) ahead of the ticket on a cap of 1.
func TestExplain_Range(t *testing.T) {
	l := throttle.Limit{Key: "k", MaxConcurrent: 1}
	e := throttle.Explain(throttle.ExplainInput{
		Ticket: throttle.Candidate{ID: 3, LimitKeys: []string{"k"}},
		Limits: map[string]throttle.LimitState{"k": {Limit: l, State: running(1, 0)}},
		Standing: map[string]throttle.Standing{"k": {
			Ahead: []throttle.Cost{{}}, AheadCount: 1,
			Releases: []throttle.Release{{At: t0.Add(2 * time.Second), Early: t0.Add(time.Second), Late: t0.Add(3 * time.Second)}},
			RunTime:  throttle.Span{Low: time.Second, Mid: 2 * time.Second, High: 3 * time.Second},
		}},
		Now: t0,
	})
	// The holder ends at 1/2/3s; the one ahead then runs 1/2/3s.
	require.Equal(t, t0.Add(4*time.Second), e.Estimate)
	require.Equal(t, t0.Add(2*time.Second), e.EstimateLow)
	require.Equal(t, t0.Add(6*time.Second), e.EstimateHigh)
	require.Equal(t, e.Estimate, e.Limits[0].ReadyAt)

	// A rate's wait has no run time in it: the range is the point.
	r := throttle.Explain(throttle.ExplainInput{
		Ticket: throttle.Candidate{ID: 1, LimitKeys: []string{"email"}},
		Limits: map[string]throttle.LimitState{"email": {Limit: throttle.Limit{Key: "email", RequestsPerSecond: 1, Burst: 1},
			State: throttle.State{Requests: throttle.Bucket{Level: 1, At: t0}}}},
		Standing: map[string]throttle.Standing{"email": {Ahead: []throttle.Cost{{}}, AheadCount: 1}},
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
	in := throttle.ExplainInput{
		Ticket:   throttle.Candidate{ID: 7, LimitKeys: []string{"openai", "tenant:b"}},
		Limits:   map[string]throttle.LimitState{"openai": {Limit: l}, "tenant:b": {Limit: throttle.Limit{Key: "tenant:b", MaxConcurrent: 1}}},
		Standing: map[string]throttle.Standing{"openai": {AheadCount: 2, HeldElsewhere: 2}},
		Now:      t0,
	}
	e := throttle.Explain(in)
	require.Equal(t, 3, e.Place)
	require.Equal(t, throttle.WaitNothing, e.WaitsFor, "both ahead wait for tenant:acme: the next claim admits this one")
	require.Equal(t, 0, e.Limits[0].Ahead)
	require.Equal(t, 2, e.Limits[0].HeldElsewhere)
	require.Equal(t, t0, e.Estimate)
}
