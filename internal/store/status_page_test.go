package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// StatusPage reads the first keys of a prefix, byte-wise (a "_" or "%" in it is no pattern), in key
// order, with the figures Status reads and the number of keys of the prefix.
func TestQueue_StatusPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 2}, throttle.Limit{Key: "tenant:a", MaxConcurrent: 1},
		throttle.Limit{Key: "tenant:b", MaxConcurrent: 1}, throttle.Limit{Key: "tenant:c", MaxConcurrent: 1},
		throttle.Limit{Key: "tenant_x", MaxConcurrent: 1}, throttle.Limit{Key: "tenantz", MaxConcurrent: 1})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"tenant:a"}, Cost: 10})
	enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"tenant:a"}, Cost: 10})
	claim(t, q, store.ClaimParams{Owner: "owner-1", Max: 10})

	keysOf := func(p store.StatusPage) []string {
		var ks []string
		for _, s := range p.Keys {
			ks = append(ks, s.Configured.Key)
		}
		return ks
	}
	page, err := q.StatusPage(ctx, store.StatusParams{Prefix: "tenant:", Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant:a", "tenant:b"}, keysOf(page))
	require.Equal(t, int64(3), page.Total, "tenant:a, b and c, not tenant_x nor tenantz")
	want, err := q.Status(ctx, "tenant:a")
	require.NoError(t, err)
	require.Equal(t, want[0], page.Keys[0], "the figures Status reads")
	require.Equal(t, int64(1), page.Keys[0].Queued)
	require.Equal(t, int64(1), page.Keys[0].Running)

	page, err = q.StatusPage(ctx, store.StatusParams{Prefix: "tenant_", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant_x"}, keysOf(page), "_ is a character, not LIKE's wildcard")

	page, err = q.StatusPage(ctx, store.StatusParams{Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Keys, 6, "no prefix: every key")
	require.Equal(t, int64(6), page.Total)

	page, err = q.StatusPage(ctx, store.StatusParams{Prefix: "nothing", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Keys)
	require.Zero(t, page.Total)

	_, err = q.StatusPage(ctx, store.StatusParams{Prefix: "tenant:", Limit: 0})
	require.EqualError(t, err, "sluice: status: Limit must be >= 1, got 0")
}
