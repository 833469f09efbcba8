package interceptor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/throttle"
)

// mailer stands for an email API with a cap per tenant; it records what it sees. A call's work lasts
// until the API is as busy as Sluice may let it be (the provider's cap, and each tenant's, filled as
// far as the calls not yet made allow): then the oldest call in flight returns. So every cap is
// reached, without a clock, and a Sluice that admitted less than it may would stall the test.
type mailer struct {
	mu        sync.Mutex
	capAll    int             // the provider's cap
	capTenant int             // each tenant's cap
	left      map[string]int  // calls not yet made, by tenant
	calls     []chan struct{} // the calls in flight, oldest first: each returns when its channel is closed
	inFlight  map[string]int
	peak      map[string]int
	total     int
	peakAll   int
	admitted  []admittedRun // in the order the runs started
}

type admittedRun struct {
	tenant string
	at     time.Time // sluiceactivity.Admission's AdmittedAt
}

func (m *mailer) Send(ctx context.Context, tenant string) error {
	info, ok := sluiceactivity.Admission(ctx)
	if !ok {
		return errors.New("mailer: not run by Sluice")
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.admitted = append(m.admitted, admittedRun{tenant, info.AdmittedAt})
	m.inFlight[tenant]++
	m.left[tenant]--
	m.total++
	m.peak[tenant] = max(m.peak[tenant], m.inFlight[tenant])
	m.peakAll = max(m.peakAll, m.total)
	m.calls = append(m.calls, done)
	m.returnOldestIfBusy()
	m.mu.Unlock()
	select {
	case <-done: // the API call
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	m.inFlight[tenant]--
	m.total--
	m.returnOldestIfBusy() // the last calls of a tenant leave slots no call will take
	m.mu.Unlock()
	return nil
}

// returnOldestIfBusy lets the oldest call in flight return once as many calls are in flight as the
// caps allow, which Send checks as each call starts and ends. m.mu is held. A call ends before its
// slot is freed and the next call admitted, so the next call finds the counts without it.
func (m *mailer) returnOldestIfBusy() {
	busiest := 0
	for tenant, left := range m.left {
		busiest += min(m.capTenant, m.inFlight[tenant]+left)
	}
	if m.total >= min(m.capAll, busiest) && len(m.calls) > 0 {
		close(m.calls[0])
		m.calls = m.calls[1:]
	}
}

func SendAll(ctx workflow.Context, tenants []string) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var fs []workflow.Future
	for _, t := range tenants {
		fs = append(fs, workflow.ExecuteActivity(ctx, "Send", t))
	}
	for _, f := range fs {
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// TestPlugin_PerTenantCapsAndFairShare: a big tenant's 40 mails are scheduled before a small one's 8,
// on a provider cap of 4 with a cap of 2 per tenant derived from the arguments. Neither cap is ever
// exceeded, and fair share admits the small tenant beside the big one instead of after it.
//
// The provider's limit is paused until all 48 tickets are in line, so that the order asserted is the
// order Sluice admitted them in, whatever order and pace Temporal handed the tasks to the worker.
func TestPlugin_PerTenantCapsAndFairShare(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	email := throttle.Limit{Key: "email", MaxConcurrent: 4}
	require.NoError(t, e.q.UpsertLimits(ctx, email))
	require.NoError(t, e.q.Pause(ctx, "email", time.Now().Add(time.Hour)))
	m := &mailer{capAll: 4, capTenant: 2, left: map[string]int{"big": 40, "small": 8}, inFlight: map[string]int{}, peak: map[string]int{}}
	tenantOf := func(_ sluiceinterceptor.ActivityInfo, args []any) string { return args[0].(string) }
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Logger: testenv.Logger(t),
		Pool:   e.pool, Client: e.c, Schema: e.schema,
		Limits: []throttle.Limit{email}, // upserted again at start: the pause, state, is kept
		Routes: map[string]sluiceinterceptor.Route{"Send": {
			Limits:      []string{"email"},
			FairnessKey: tenantOf,
			KeyLimits: func(info sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
				return []throttle.Limit{{Key: "tenant:" + tenantOf(info, args), MaxConcurrent: 2}}
			},
		}},
		PollInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	w := worker.New(e.c, e.queue, worker.Options{DeadlockDetectionTimeout: temporaltest.DeadlockTimeout, Plugins: []worker.Plugin{plugin}})
	w.RegisterWorkflow(SendAll)
	w.RegisterActivityWithOptions(m.Send, activity.RegisterOptions{Name: "Send"})
	require.NoError(t, w.Start())
	defer w.Stop()

	var tenants []string
	for range 40 {
		tenants = append(tenants, "big")
	}
	for range 8 {
		tenants = append(tenants, "small")
	}
	run, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: e.queue}, SendAll, tenants)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.sluice_ticket WHERE state = 'queued'`).Scan(&n)
		return err == nil && n == len(tenants)
	}, 3*time.Minute, 20*time.Millisecond, "every ticket is in line")
	require.NoError(t, e.q.Resume(ctx, "email"))
	require.NoError(t, run.Get(ctx, nil))

	m.mu.Lock()
	defer m.mu.Unlock()
	require.LessOrEqual(t, m.peak["big"], 2)
	require.LessOrEqual(t, m.peak["small"], 2)
	require.LessOrEqual(t, m.peakAll, 4)
	require.Len(t, m.admitted, len(tenants))
	order := slices.Clone(m.admitted)
	slices.SortStableFunc(order, func(a, b admittedRun) int { return a.at.Compare(b.at) })
	lastSmall := 0
	for i, r := range order {
		if r.tenant == "small" {
			lastSmall = i
		}
	}
	// In arrival order the small tenant would be admitted last (positions 40-47). With fair share and
	// its own cap it goes two at a time beside the big tenant's two: its eighth admission comes about
	// sixteenth. 24 leaves room for admissions that share a claim (one instant) in any order.
	require.Less(t, lastSmall, 24, "admission order: %v", order)
	st, err := e.q.LimitStatus(ctx, "tenant:small")
	require.NoError(t, err)
	require.Equal(t, 2, st.Configured.MaxConcurrent, "the derived limit was created")
	requireHealthy(t, e.q)
}

func TestPlugin_BadWeightFailsTheAttemptClearly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := newEnv(t, &acts{})
	opts := e.options(throttle.Limit{Key: "svc", MaxConcurrent: 1})
	opts.Routes = map[string]sluiceinterceptor.Route{"Double": {
		Limits:      []string{"svc"},
		FairnessKey: func(sluiceinterceptor.ActivityInfo, []any) string { return "t" },
		Weight:      func(string) float64 { return -2 },
	}}
	e.startWorker(t, opts)
	run, err := e.run(t, ctx, FanOut, fanOutInput{N: 1})
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	require.ErrorContains(t, err, `Routes["Double"].Weight("t")`)
	require.ErrorContains(t, err, "got -2")
}
