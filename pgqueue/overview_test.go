package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// keysOf is the keys of an overview's page, in its order.
func keysOf(o pgqueue.Overview) []string {
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
		enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"a:1"}})
	}
	b.clock.Add(time.Minute)
	enqueue(t, q, pgqueue.EnqueueParams{LimitKeys: []string{"a:2"}, Cost: 300})
	b.clock.Add(time.Second)
	require.Len(t, claim(t, q, pgqueue.ClaimParams{Owner: "owner-1", Max: 10}).Admitted, 2, "a:1's burst of 1, and a:2")
	b.clock.Add(time.Second)

	all, err := q.Overview(ctx, pgqueue.OverviewParams{Limit: 10})
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
	require.Equal(t, pgqueue.OverviewRow{Key: "a:1", Queued: 2, OldestQueued: t0, OldestWait: a1.OldestWait, InflightCount: 1, MaxConcurrent: 4,
		RequestsLastMinute: 1, RequestsPerMinute: 60, Use: 0.25, UseOf: "concurrency"}, a1, "1 of 4 beats 1 of 60 a minute")
	a2 := all.Rows[2]
	require.Equal(t, 0.3, a2.Use, "300 tokens of 1000 a minute")
	require.Equal(t, "tokens", a2.UseOf)
	require.Zero(t, a2.OldestWait, "nothing waits")
	require.Equal(t, pgqueue.OverviewRow{Key: "a:3", MaxInflightTokens: 1000}, all.Rows[3], "nothing used: no limit named")

	for _, c := range []struct {
		name string
		p    pgqueue.OverviewParams
		want []string
	}{
		{"QueuedDesc", pgqueue.OverviewParams{Sort: pgqueue.OverviewByQueued, Desc: true, Limit: 2}, []string{"a:1", "a%"}},
		{"OldestWaitDesc", pgqueue.OverviewParams{Sort: pgqueue.OverviewByOldestWait, Desc: true, Limit: 1}, []string{"a:1"}},
		{"UseDesc", pgqueue.OverviewParams{Sort: pgqueue.OverviewByUse, Desc: true, Limit: 3}, []string{"a:2", "a:1", "a%"}},
		{"UseAscTiesByKey", pgqueue.OverviewParams{Sort: pgqueue.OverviewByUse, Limit: 4}, []string{"a%", "a:3", "a_é", "b"}},
		{"KeyDescSecondPage", pgqueue.OverviewParams{Desc: true, Limit: 2, Offset: 2}, []string{"a:3", "a:2"}},
		// LIKE would read % and _ as wildcards; the prefix is a byte-wise range.
		{"PrefixIsLiteral", pgqueue.OverviewParams{Prefix: "a%", Limit: 10}, []string{"a%"}},
		{"PrefixUnderscore", pgqueue.OverviewParams{Prefix: "a_", Limit: 10}, []string{"a_é"}},
		{"PrefixColon", pgqueue.OverviewParams{Prefix: "a:", Sort: pgqueue.OverviewByQueued, Desc: true, Limit: 10}, []string{"a:1", "a:2", "a:3"}},
		{"PastTheEnd", pgqueue.OverviewParams{Limit: 10, Offset: 6}, []string{}},
		{"NoMatch", pgqueue.OverviewParams{Prefix: "zz", Limit: 10}, []string{}},
	} {
		o, err := q.Overview(ctx, c.p)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, keysOf(o), c.name)
	}
	o, err := q.Overview(ctx, pgqueue.OverviewParams{Prefix: "a:", Limit: 1, Offset: 5})
	require.NoError(t, err)
	require.Empty(t, o.Rows)
	require.Equal(t, int64(3), o.Total, "an empty page still counts the keys")

	for _, c := range []struct {
		p   pgqueue.OverviewParams
		msg string
	}{
		{pgqueue.OverviewParams{Sort: "color", Limit: 1}, `Sort must be one of key, queued, oldest_wait, use, got "color"`},
		{pgqueue.OverviewParams{}, "Limit must be from 1 to 1000, got 0"},
		{pgqueue.OverviewParams{Limit: 1001}, "Limit must be from 1 to 1000, got 1001"},
		{pgqueue.OverviewParams{Limit: 1, Offset: -1}, "Offset must be >= 0, got -1"},
	} {
		_, err := q.Overview(ctx, c.p)
		require.ErrorContains(t, err, c.msg)
	}
}
