package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// history reads key's whole history, requiring no error.
func history(t *testing.T, q *store.Queue, key string) []store.LimitRecord {
	t.Helper()
	h, err := q.LimitHistory(context.Background(), key, time.Time{}, 100)
	require.NoError(t, err)
	return h
}

// table is the schema's sluice_limit, quoted, for changes made in SQL.
func table(q *store.Queue) string { return pgx.Identifier{q.Schema(), "sluice_limit"}.Sanitize() }

// Every change of a limit's configuration is recorded with before, after, when and who, whoever made
// it: pgqueue with a who or without, SQL, header learning; the admission's own updates record nothing.
func TestQueue_LimitHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UpsertAndChangeSayWho", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t)
		alice := store.WithChangedBy(ctx, "alice@laptop (sluice limits set)")
		require.NoError(t, q.UpsertLimits(alice, throttle.Limit{Key: "openai", MaxConcurrent: 2, RequestsPerSecond: 10}))
		b.clock.Add(time.Minute)
		require.NoError(t, q.UpsertLimits(alice, throttle.Limit{Key: "openai", MaxConcurrent: 2, RequestsPerSecond: 10}))
		_, err := q.ChangeLimit(ctx, "openai", throttle.LimitChange{RequestsPerSecond: ptr(5.0)}, false)
		require.NoError(t, err)

		h := history(t, q, "openai")
		require.Len(t, h, 2, "an upsert that changes nothing records nothing")
		require.Equal(t, store.ChangeCreated, h[0].Kind)
		require.Equal(t, t0, h[0].At)
		require.Equal(t, "alice@laptop (sluice limits set)", h[0].Who)
		require.Nil(t, h[0].Before)
		require.Equal(t, &throttle.Limit{Key: "openai", MaxConcurrent: 2, RequestsPerSecond: 10, Burst: 10}, h[0].After)
		require.Equal(t, []store.FieldChange{{Field: "max_concurrent", After: 2}, {Field: "requests_per_second", After: 10},
			{Field: "burst", After: 10}}, h[0].Changed)

		require.Equal(t, store.ChangeConfigured, h[1].Kind)
		require.Equal(t, t0.Add(time.Minute), h[1].At)
		require.Equal(t, store.ProgramChangedBy(), h[1].Who, "without a who, the program")
		require.Regexp(t, `^program \S+ pid \d+ on \S+`, h[1].Who)
		require.Equal(t, h[0].After, h[1].Before)
		require.Equal(t, []store.FieldChange{{Field: "requests_per_second", Before: 10, After: 5}, {Field: "burst", Before: 10, After: 5}},
			h[1].Changed, "the burst went back to its default with the rate")
	})

	t.Run("AllowancesAddedRemovedResizedAndOnSpent", func(t *testing.T) {
		t.Parallel()
		before := allowances(t, "tokens=50000/day@America/Los_Angeles", "usd=0.50/day", "requests=10/hour")
		before[0].OnSpent, before[1].OnSpent = throttle.OnSpentRefuse, throttle.OnSpentRefuse
		q, _ := setup(t, throttle.Limit{Key: "plan:free", MaxConcurrent: 1, Allowances: before})
		after := allowances(t, "output_tokens=900/24h", "tokens=70000/day@America/Los_Angeles", "requests=10/hour")
		after[2].OnSpent = throttle.OnSpentWait // as it was: an empty OnSpent waits
		require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "plan:free", MaxConcurrent: 1, Allowances: after}))
		flipped := append(throttle.Allowances(nil), after...)
		flipped[0].OnSpent = throttle.OnSpentRefuse
		require.NoError(t, q.UpsertLimits(ctx, throttle.Limit{Key: "plan:free", MaxConcurrent: 2, Allowances: flipped}))

		h := history(t, q, "plan:free")
		require.Len(t, h, 3)
		require.Equal(t, []store.FieldChange{{Field: "max_concurrent", After: 1},
			{Field: "allowances", After: 50_000, AfterAllowance: &before[0]},
			{Field: "allowances", After: 500_000, AfterAllowance: &before[1]},
			{Field: "allowances", After: 10, AfterAllowance: &before[2]}}, h[0].Changed, "created: each allowance added")
		require.Equal(t, []store.FieldChange{
			{Field: "allowances", Before: 50_000, After: 70_000, BeforeAllowance: &before[0], AfterAllowance: &after[1]},
			{Field: "allowances", Before: 500_000, BeforeAllowance: &before[1]},
			{Field: "allowances", After: 900, AfterAllowance: &after[0]},
		}, h[1].Changed, "resized (and now waits), removed, added; the hourly one kept as it was")
		require.Equal(t, []store.FieldChange{{Field: "max_concurrent", Before: 1, After: 2},
			{Field: "allowances", Before: 900, After: 900, BeforeAllowance: &after[0], AfterAllowance: &flipped[0]}}, h[2].Changed,
			"what it does when spent, alone")
	})

	t.Run("SQLChangesSayTheSessionUser", func(t *testing.T) {
		t.Parallel()
		q, _ := setup(t, throttle.Limit{Key: "openai", TokensPerMinute: 90_000})
		_, err := q.Pool().Exec(ctx, `UPDATE `+table(q)+` SET tokens_per_minute = 120000, token_burst = 120000 WHERE key = 'openai'`)
		require.NoError(t, err)
		var who string
		require.NoError(t, q.Pool().QueryRow(ctx,
			`SELECT session_user || coalesce('@' || host(inet_client_addr()), ' (local socket)')`).Scan(&who))

		h := history(t, q, "openai")
		require.Len(t, h, 2)
		require.Equal(t, store.ChangeConfigured, h[1].Kind)
		require.Equal(t, who, h[1].Who)
		require.Contains(t, who, "@", "the test connects over TCP")
		require.Equal(t, []store.FieldChange{{Field: "tokens_per_minute", Before: 90_000, After: 120_000},
			{Field: "token_burst", Before: 90_000, After: 120_000}}, h[1].Changed)

		// A transaction may say who itself, as pgqueue does.
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT set_config('sluice.changed_by', 'migration 42 by bob', true)`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `DELETE FROM `+table(q)+` WHERE key = 'openai'`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		h = history(t, q, "openai")
		require.Len(t, h, 3, "a deleted key keeps its history")
		require.Equal(t, store.ChangeDeleted, h[2].Kind)
		require.Equal(t, "migration 42 by bob", h[2].Who)
		require.Nil(t, h[2].After)
		require.Equal(t, h[1].After, h[2].Before)
	})

	t.Run("LearnedIsKeptApart", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "openai", RequestsPerSecond: 10, TokensPerMinute: 60_000})
		b.clock.Add(time.Second)
		info := throttle.RateLimitInfo{TokensLimit: 30_000, TokensRemaining: 1000, HasTokensRemaining: true}
		require.NoError(t, q.Observe(ctx, "openai", info))
		b.clock.Add(time.Second)
		require.NoError(t, q.Observe(ctx, "openai", info), "the same figures again")

		h := history(t, q, "openai")
		require.Len(t, h, 2, "a second observation teaching the same records nothing")
		l := h[1]
		require.Equal(t, store.ChangeLearned, l.Kind)
		require.Equal(t, "header learning", l.Who)
		require.Equal(t, t0.Add(time.Second), l.At)
		require.Equal(t, &throttle.Limit{Key: "openai"}, l.Before, "nothing learned before")
		require.Equal(t, &throttle.Limit{Key: "openai", TokensPerMinute: 30_000, TokenBurst: 30_000}, l.After)
		require.Equal(t, []store.FieldChange{{Field: "tokens_per_minute", After: 30_000}, {Field: "token_burst", After: 30_000}}, l.Changed)
	})

	t.Run("AdmissionRecordsNothing", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "openai", MaxConcurrent: 5, RequestsPerSecond: 10, TokensPerMinute: 60_000})
		for range 3 {
			enqueue(t, q, store.EnqueueParams{LimitKeys: []string{"openai"}, Cost: 100})
		}
		res := claim(t, q, store.ClaimParams{})
		require.Len(t, res.Admitted, 3)
		_, err := q.Pool().Exec(ctx, `UPDATE `+table(q)+` SET request_level = 1, inflight_count = 3, vtime = 7 WHERE key = 'openai'`)
		require.NoError(t, err, "a state-only update, as a claim writes")
		require.NoError(t, q.Pause(ctx, "openai", t0.Add(time.Minute)))
		require.NoError(t, q.Resume(ctx, "openai"))
		b.clock.Add(time.Second)
		require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{TokensRemaining: 10, HasTokensRemaining: true}))
		require.Len(t, history(t, q, "openai"), 1, "only its creation")

		// The history adds no index to sluice_limit: the admission's updates stay HOT.
		tx, err := q.Pool().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// The backend's pending counts, which may hold earlier transactions' too: the difference counts.
		counts := func() (upd, hot int64) {
			require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`,
				table(q)).Scan(&upd, &hot))
			return upd, hot
		}
		upd0, hot0 := counts()
		_, err = tx.Exec(ctx, `UPDATE `+table(q)+` SET request_level = 2, vtime = 8, updated_at = now() WHERE key = 'openai'`)
		require.NoError(t, err)
		upd1, hot1 := counts()
		require.Equal(t, [2]int64{1, 1}, [2]int64{upd1 - upd0, hot1 - hot0}, "one update, HOT")
	})

	t.Run("SinceMaxAndErrors", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		for n := 2; n <= 5; n++ {
			b.clock.Add(time.Minute)
			_, err := q.ChangeLimit(ctx, "k", throttle.LimitChange{MaxConcurrent: ptr(n)}, false)
			require.NoError(t, err)
		}
		h, err := q.LimitHistory(ctx, "k", t0.Add(2*time.Minute), 100)
		require.NoError(t, err)
		require.Len(t, h, 3, "since is inclusive")
		h, err = q.LimitHistory(ctx, "k", time.Time{}, 2)
		require.NoError(t, err)
		require.Len(t, h, 2)
		require.Equal(t, []int{4, 5}, []int{h[0].After.MaxConcurrent, h[1].After.MaxConcurrent}, "the last max, oldest first")

		_, err = q.LimitHistory(ctx, "nope", time.Time{}, 10)
		require.ErrorIs(t, err, store.ErrUnknownLimit)
		for _, bad := range []int{0, -1, store.MaxLimitHistory + 1} {
			_, err = q.LimitHistory(ctx, "k", time.Time{}, bad)
			require.ErrorContains(t, err, "max must be from 1 to 10000, got ")
		}
		// A key that exists with no history left (pruned, or older than the history) has none.
		_, err = q.Pool().Exec(ctx, `DELETE FROM `+pgx.Identifier{q.Schema(), "sluice_limit_change"}.Sanitize())
		require.NoError(t, err)
		h, err = q.LimitHistory(ctx, "k", time.Time{}, 10)
		require.NoError(t, err)
		require.Empty(t, h)
		require.NotNil(t, h)
	})

	t.Run("PruneKeepsNinetyDays", func(t *testing.T) {
		t.Parallel()
		q, b := setup(t, throttle.Limit{Key: "k", MaxConcurrent: 1})
		b.clock.Add(store.LimitHistoryRetention)
		_, err := q.ChangeLimit(ctx, "k", throttle.LimitChange{MaxConcurrent: ptr(2)}, false)
		require.NoError(t, err)
		b.clock.Add(time.Second)
		_, err = q.Prune(ctx, store.PruneParams{})
		require.NoError(t, err)
		h := history(t, q, "k")
		require.Len(t, h, 1)
		require.Equal(t, store.ChangeConfigured, h[0].Kind)
	})
}

// LimitSteps gives the limit as it stood at each moment, as admission applied it: configured changes
// and learned ones, worked back from the row as it stands.
func TestQueue_LimitSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t)
	require.NoError(t, q.EnsureLimits(store.WithChangedBy(ctx, "tenant setup"), throttle.Limit{Key: "openai", RequestsPerSecond: 10},
		throttle.Limit{Key: "other", MaxConcurrent: 1}))
	b.clock.Add(time.Minute)
	_, err := q.ChangeLimit(ctx, "openai", throttle.LimitChange{RequestsPerSecond: ptr(5.0)}, false)
	require.NoError(t, err)
	b.clock.Add(time.Minute)
	require.NoError(t, q.Observe(ctx, "openai", throttle.RateLimitInfo{RequestsLimit: 120})) // 2/s
	b.clock.Add(time.Minute)
	_, err = q.ChangeLimit(ctx, "openai", throttle.LimitChange{RequestsPerSecond: ptr(1.0)}, false)
	require.NoError(t, err)

	h := history(t, q, "openai")
	require.Equal(t, "tenant setup", h[0].Who)
	steps, err := q.LimitSteps(ctx, []string{"openai", "other", "nope"}, t0.Add(-time.Minute))
	require.NoError(t, err)
	require.NotContains(t, steps, "nope")
	require.Len(t, steps["other"], 2)
	rps := func(c, e float64) [2]float64 { return [2]float64{c, e} }
	var got [][2]float64
	var at []time.Time
	for _, s := range steps["openai"] {
		got, at = append(got, rps(s.Configured.RequestsPerSecond, s.Effective.RequestsPerSecond)), append(at, s.At)
	}
	require.Equal(t, [][2]float64{rps(0, 0), rps(10, 10), rps(5, 5), rps(5, 2), rps(1, 1)}, got,
		"none before its creation; the learned 2/s lowers the 5/s set, not the 1/s set after it")
	require.Equal(t, []time.Time{t0.Add(-time.Minute), t0, t0.Add(time.Minute), t0.Add(2 * time.Minute), t0.Add(3 * time.Minute)}, at)

	steps, err = q.LimitSteps(ctx, []string{"openai"}, t0.Add(90*time.Second))
	require.NoError(t, err)
	require.Len(t, steps["openai"], 3, "the limit at since, then the changes after it")
	require.Equal(t, 5.0, steps["openai"][0].Effective.RequestsPerSecond)
	require.Equal(t, 5.0, steps["openai"][0].Effective.Burst)
}
