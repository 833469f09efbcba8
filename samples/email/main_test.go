package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/pgqueue"
)

// TestEmail runs the sample in its short configuration, so that it cannot rot, and checks what it
// shows: every email sent, no tenant above its cap of 2 nor the provider above 6 across the two
// workers, and smallco, whose emails were scheduled after all of bigco's, done well before bigco.
func TestEmail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	pool := testdb.Pool(t)

	t.Run("Short", func(t *testing.T) {
		cfg := ShortConfig()
		// A longer bigco backlog than -short's: the dev server's task queue has several partitions,
		// and now and then it hands a few activity tasks to the workers a second or two late. Delayed
		// emails of smallco's must still finish before bigco's last. 90 lost that race about one run in
		// four on a 2-core machine under a load of 20; 150 leave smallco's 5 three times the room.
		cfg.Tenants[0].Emails = 150
		cfg.Schema, cfg.TaskQueue = testdb.Schema(t, pool), "email-"+testdb.NewSchemaName()
		res, err := run(ctx, cfg, testdb.URL(t), s.Addr)
		require.NoError(t, err)
		var out bytes.Buffer
		report(&out, cfg, res)
		t.Log("\n" + out.String())

		want := 0
		for i, tn := range cfg.Tenants {
			got := res.Tenants[i]
			require.Equal(t, tn.Name, got.Name)
			require.Equal(t, tn.Emails, got.Emails, "%s: emails sent", tn.Name)
			require.LessOrEqual(t, got.Peak, cfg.TenantCap, "%s: peak concurrency", tn.Name)
			want += tn.Emails
		}
		require.Equal(t, want, res.Sent)
		require.LessOrEqual(t, res.Peak, cfg.ProviderCap, "overall peak concurrency")
		big, small := res.Tenant("bigco"), res.Tenant("smallco")
		require.Less(t, small.Last, big.Last, "smallco finishes before bigco's last email")

		// Each tenant is held to its cap of 2, so the weight has nothing to decide: about as many
		// of premium's as of smallco's are admitted while both have a backlog (not asserted).

		// The per-tenant limits were derived from the arguments and created.
		q, err := pgqueue.New(pool, pgqueue.Options{Schema: cfg.Schema})
		require.NoError(t, err)
		l, err := q.Limit(ctx, "tenant:smallco")
		require.NoError(t, err)
		require.Equal(t, cfg.TenantCap, l.MaxConcurrent)
	})

	// With the default caps the weight cannot show: three tenants capped at 2 fill the provider's 6,
	// so each runs at its own cap. With a provider cap of 3 they contend for its slots, and fair share
	// gives premium (weight 2) about twice smallco's share while both have emails queued (asserted
	// only as more). The full-size burst, as the short one has too few of smallco's emails to tell a
	// share from noise.
	t.Run("WeightWhenProviderBinds", func(t *testing.T) {
		cfg := DefaultConfig(1)
		cfg.ProviderCap = 3
		cfg.Schema, cfg.TaskQueue = testdb.Schema(t, pool), "email-"+testdb.NewSchemaName()
		res, err := run(ctx, cfg, testdb.URL(t), s.Addr)
		require.NoError(t, err)
		var out bytes.Buffer
		report(&out, cfg, res)
		t.Log("\n" + out.String())

		require.LessOrEqual(t, res.Peak, cfg.ProviderCap, "overall peak concurrency")
		for _, tn := range res.Tenants {
			require.LessOrEqual(t, tn.Peak, cfg.TenantCap, "%s: peak concurrency", tn.Name)
		}
		np, ns := res.AdmittedWhileBothQueued("premium", "smallco")
		require.Greater(t, np, ns, "admitted while both premium and smallco had emails queued")
	})
}
