package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// TestPlans runs the sample, so that it cannot rot, and checks what it shows: before midnight the
// free tenant and the team's spend cap are spent and their extra questions refused, with the reset
// at midnight in Los Angeles, while pro is answered in full; no allowance is over its amount; the
// refused calls never reached the provider; after midnight every tenant is answered again.
func TestPlans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := temporaltest.Start(ctx)
	require.NoError(t, err)
	s = temporaltest.Require(t, s)
	defer s.Stop()
	pool := testdb.Pool(t)
	cfg := DefaultConfig()
	cfg.Schema, cfg.TaskQueue = testdb.Schema(t, pool), "plans-"+testdb.NewSchemaName()
	res, err := run(ctx, cfg, testdb.URL(t), s.Addr)
	require.NoError(t, err)
	var out bytes.Buffer
	report(&out, cfg, res)
	t.Log("\n" + out.String())

	require.Len(t, res.Phases, 2)
	before, after := res.Phases[0], res.Phases[1]
	reset := time.Date(2026, 2, 11, 8, 0, 0, 0, time.UTC) // midnight in Los Angeles
	answered := 0
	for _, p := range cfg.Plans {
		a, st := before.Asked[p.Tenant], before.Allowances[p.Tenant]
		require.Equal(t, p.Before, a.Answered+a.Refused, p.Tenant)
		require.LessOrEqual(t, st.Used, st.Allowance.Amount, "%s: within its allowance", p.Tenant)
		require.Equal(t, reset, st.ResetsAt, p.Tenant)
		if st.Allowance.Meter == throttle.MeterMoney {
			require.Equal(t, a.Money, st.Used, "%s: the allowance counts what the answers cost", p.Tenant)
		} else {
			require.Equal(t, a.Tokens, st.Used, "%s: the allowance counts the tokens the answers used", p.Tenant)
		}
		answered += a.Answered
		require.Equal(t, p.After, after.Asked[p.Tenant].Answered, "%s: answered after midnight", p.Tenant)
	}
	for _, tenant := range []string{"free", "team"} {
		a := before.Asked[tenant]
		require.Positive(t, a.Refused, tenant)
		require.NotNil(t, a.Spent, tenant)
		require.Equal(t, reset, a.Spent.ResetAt, tenant)
		require.Contains(t, a.FirstRefusal, "sluice: limit tenant:"+tenant+": allowance ", tenant)
		require.Contains(t, a.FirstRefusal, "; resets at 2026-02-11T08:00:00Z (2026-02-11 00:00 PST)", tenant)
	}
	require.Zero(t, before.Asked["pro"].Refused)
	for _, p := range cfg.Plans {
		answered += after.Asked[p.Tenant].Answered
	}
	require.Equal(t, answered, res.Calls, "refused calls never reached the provider")
}
