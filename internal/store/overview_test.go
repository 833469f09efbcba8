package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// keysOf is the keys of an overview's page, in its order.
func keysOf(o store.Overview) []string {
	out := make([]string, len(o.Rows))
	for i, r := range o.Rows {
		out[i] = r.Key
	}
	return out
}

// Overview pages the keys in the database: ordered by a figure or by key, cut by a byte-wise prefix,
// with the share of the limit that binds.
func TestQueue_Overview(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, throttle.Limit{Key: "a:1", MaxConcurrent: 4, RequestsPerSecond: 1},
		throttle.Limit{Key: "a:2", MaxConcurrent: 10, TokensPerMinute: 1000},
		throttle.Limit{Key: "a:3", MaxInflightTokens: 1000}, throttle.Limit{Key: "b", MaxConcurrent: 1},
		throttle.Limit{Key: "a%", MaxConcurrent: 1}, throttle.Limit{Key: "a_é", RequestsPerSecond: 5})
	for range 3 {
		enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"a:1"}})
	}
	b.clock.Add(time.Minute)
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"a:2"}, Cost: 300})
	b.clock.Add(time.Second)
	require.Len(t, claim(t, q, store.ClaimParams{Owner: "owner-1", Max: 10}).Admitted, 2, "a:1's burst of 1, and a:2")
	b.clock.Add(time.Second)

	all, err := q.Overview(ctx, store.OverviewParams{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"a%", "a:1", "a:2", "a:3", "a_é", "b"}, keysOf(all))
	require.Equal(t, int64(6), all.Total)
	require.Equal(t, t0.Add(time.Minute+2*time.Second), all.Now)
	a1 := all.Rows[1]
	require.Equal(t, int64(2), a1.Queued)
	require.Equal(t, t0, a1.OldestQueued)
	require.Equal(t, time.Minute+2*time.Second, a1.OldestWait)
	require.Equal(t, int64(1), a1.InflightCount)
	require.Equal(t, 60.0, a1.RequestsPerMinute)
	require.Equal(t, int64(1), a1.RequestsLastMinute)
	require.Equal(t, store.OverviewRow{Key: "a:1", Queued: 2, OldestQueued: t0, OldestWait: a1.OldestWait, InflightCount: 1, MaxConcurrent: 4,
		RequestsLastMinute: 1, RequestsPerMinute: 60, Use: 0.25, UseOf: "concurrency"}, a1, "1 of 4 beats 1 of 60 a minute")
	a2 := all.Rows[2]
	require.Equal(t, 0.3, a2.Use, "300 tokens of 1000 a minute")
	require.Equal(t, "tokens", a2.UseOf)
	require.Zero(t, a2.OldestWait, "nothing waits")
	require.Equal(t, store.OverviewRow{Key: "a:3", MaxInflightTokens: 1000}, all.Rows[3], "nothing used: no limit named")

	for _, c := range []struct {
		name string
		p    store.OverviewParams
		want []string
	}{
		{"QueuedDesc", store.OverviewParams{Sort: store.OverviewByQueued, Desc: true, Limit: 2}, []string{"a:1", "a%"}},
		{"OldestWaitDesc", store.OverviewParams{Sort: store.OverviewByOldestWait, Desc: true, Limit: 1}, []string{"a:1"}},
		{"UseDesc", store.OverviewParams{Sort: store.OverviewByUse, Desc: true, Limit: 3}, []string{"a:2", "a:1", "a%"}},
		{"UseAscTiesByKey", store.OverviewParams{Sort: store.OverviewByUse, Limit: 4}, []string{"a%", "a:3", "a_é", "b"}},
		{"KeyDescSecondPage", store.OverviewParams{Desc: true, Limit: 2, Offset: 2}, []string{"a:3", "a:2"}},
		// LIKE would read % and _ as wildcards; the prefix is a byte-wise range.
		{"PrefixIsLiteral", store.OverviewParams{Prefix: "a%", Limit: 10}, []string{"a%"}},
		{"PrefixUnderscore", store.OverviewParams{Prefix: "a_", Limit: 10}, []string{"a_é"}},
		{"PrefixColon", store.OverviewParams{Prefix: "a:", Sort: store.OverviewByQueued, Desc: true, Limit: 10}, []string{"a:1", "a:2", "a:3"}},
		{"PastTheEnd", store.OverviewParams{Limit: 10, Offset: 6}, []string{}},
		{"NoMatch", store.OverviewParams{Prefix: "zz", Limit: 10}, []string{}},
	} {
		o, err := q.Overview(ctx, c.p)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, keysOf(o), c.name)
	}
	o, err := q.Overview(ctx, store.OverviewParams{Prefix: "a:", Limit: 1, Offset: 5})
	require.NoError(t, err)
	require.Empty(t, o.Rows)
	require.Equal(t, int64(3), o.Total, "an empty page still counts the keys")

	for _, c := range []struct {
		p   store.OverviewParams
		msg string
	}{
		{store.OverviewParams{Sort: "color", Limit: 1}, `Sort must be one of key, queued, oldest_wait, use, got "color"`},
		{store.OverviewParams{}, "Limit must be from 1 to 1000, got 0"},
		{store.OverviewParams{Limit: 1001}, "Limit must be from 1 to 1000, got 1001"},
		{store.OverviewParams{Limit: 1, Offset: -1}, "Offset must be >= 0, got -1"},
	} {
		_, err := q.Overview(ctx, c.p)
		require.ErrorContains(t, err, c.msg)
	}
}

// An overview's use counts the allowances: a key with 9,500 of its 10,000 tokens a day used is at 95%
// of its allowance, named, in every order; ordered by use it sorts by the largest of its limits' and
// allowances' shares, and a reconciliation not yet folded by a claim counts.
func TestQueue_OverviewCountsAllowances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "k:budget", Allowances: allowances(t, "requests=100/day", "tokens=10000/day")},
		throttle.Limit{Key: "k:slots", MaxConcurrent: 2, Allowances: allowances(t, "tokens=1000000/day")},
		throttle.Limit{Key: "k:idle", Allowances: allowances(t, "tokens=10000/day")},
		throttle.Limit{Key: "k:none", MaxConcurrent: 10})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k:budget"}, Cost: 9500})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k:slots"}, Cost: 100})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"k:none"}, Cost: 100})
	res := claim(t, q, store.ClaimParams{Max: 10})
	require.Len(t, res.Admitted, 3)

	byKey := func(o store.Overview) map[string]store.OverviewRow {
		m := map[string]store.OverviewRow{}
		for _, r := range o.Rows {
			m[r.Key] = r
		}
		return m
	}
	for _, sort := range []store.OverviewSort{store.OverviewByKey, store.OverviewByQueued, store.OverviewByOldestWait, store.OverviewByUse} {
		o, err := q.Overview(ctx, store.OverviewParams{Prefix: "k:", Sort: sort, Desc: true, Limit: 10})
		require.NoError(t, err, sort)
		rows := byKey(o)
		require.Equal(t, 0.95, rows["k:budget"].Use, "%s: 9,500 of 10,000 tokens (and 1 of 100 requests)", sort)
		require.Equal(t, "allowance tokens=10000/day", rows["k:budget"].UseOf, sort)
		require.Equal(t, 0.5, rows["k:slots"].Use, "%s: 1 of 2 slots beats 100 of a million tokens", sort)
		require.Equal(t, "concurrency", rows["k:slots"].UseOf, sort)
		require.Zero(t, rows["k:idle"].Use, "%s: nothing counted", sort)
		require.Empty(t, rows["k:idle"].UseOf, sort)
		require.Equal(t, 0.1, rows["k:none"].Use, sort)
	}
	o, err := q.Overview(ctx, store.OverviewParams{Prefix: "k:", Sort: store.OverviewByUse, Desc: true, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"k:budget", "k:slots"}, keysOf(o), "the allowance's use sorts the key first")
	o, err = q.Overview(ctx, store.OverviewParams{Prefix: "k:", Sort: store.OverviewByUse, Limit: 2, Offset: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"k:slots", "k:budget"}, keysOf(o), "ascending, the last page")

	// Usage reported below the reservation gives back to the allowance before any claim folds it in.
	require.NoError(t, q.Complete(ctx, store.CompleteParams{TicketID: res.Admitted[0].ID, ActualCost: 2000}))
	o, err = q.Overview(ctx, store.OverviewParams{Prefix: "k:b", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 0.2, o.Rows[0].Use, "2,000 of 10,000 tokens")
	require.Equal(t, "allowance tokens=10000/day", o.Rows[0].UseOf)
	o, err = q.Overview(ctx, store.OverviewParams{Prefix: "k:", Sort: store.OverviewByUse, Desc: true, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{"k:slots"}, keysOf(o))
}
