package interceptor_test

// The fault scenario of a Postgres restart under load; the harness is in faults_test.go.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/pgcluster"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// TestFaults_PostgresRestart runs three in-process workers against a private Postgres cluster and
// restarts it (fast shutdown; down until every worker has felt it, a claim and a lease renewal of
// each failing, which a LeaseTTL/3 of 5s bounds; start) while activities are queued and running. The
// dispatchers reconnect (claims, owner loops, notification listeners, leases, deliveries, enqueues
// that failed meanwhile are retried by Temporal), every activity completes once the database is back,
// the limit holds throughout, and no ticket is left behind.
//
// The runs holding the limit's slots at the restart have done their work and wait at a gate until
// the database is back. A run that finishes while the database is down is not covered: the
// dispatcher records its outcome once (runtime.startRun: Complete's error is logged and the ticket
// stays running under a live owner, holding its slot for as long as the process lives), which with
// every slot caught that way stops the limit for good.
func TestFaults_PostgresRestart(t *testing.T) {
	t.Parallel()
	s := temporaltest.Require(t, server)
	cluster := pgcluster.Start(t)
	n, restarts := 150, 1
	if faultsFull() {
		n, restarts = 600, 3
	}
	const maxConc = 5
	cfg, err := pgxpool.ParseConfig(cluster.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-faults"
	pool := testdb.PoolWith(t, cfg)
	schema := testdb.Schema(t, pool)
	q, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(t, err)
	c := s.Client(t)
	queue := "q-" + testdb.NewSchemaName()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	g := newFaultsGate()
	a := &faultActs{hold: 100 * time.Millisecond, gate: g.wait}
	var witnesses []*outageWitness
	for range 3 {
		opts := faultsOptions(pool, c, schema, throttle.Limit{Key: "svc", MaxConcurrent: maxConc})
		// A lease longer than the outage: a live worker's tickets are not handed back because the
		// database was away for a moment.
		opts.LeaseTTL = 15 * time.Second
		w := newOutageWitness()
		witnesses = append(witnesses, w)
		opts.Logger = slog.New(w)
		faultsStartWorker(t, c, queue, opts, a)
	}
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "wf-" + testdb.NewSchemaName()},
		FaultsFanOut, faultsFanOutInput{N: n, HeartbeatTimeout: 10 * time.Second})
	require.NoError(t, err)
	result := make(chan error, 1)
	var sum int
	go func() { result <- run.Get(ctx, &sum) }()
	defer func() {
		if t.Failed() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rows, err := pool.Query(ctx, `SELECT id, lease_expires_at - clock_timestamp() FROM `+pgx.Identifier{schema, "sluice_owner"}.Sanitize())
			if err == nil {
				for rows.Next() {
					var id string
					var left time.Duration
					_ = rows.Scan(&id, &left)
					t.Logf("owner %s: lease has %s left", id, left)
				}
				rows.Close()
			}
			states, _ := ticketStates(ctx, pool, schema)
			t.Logf("tickets by owner: %v", states)
			t.Logf("server log:\n%s", cluster.Log(15))
		}
	}()

	runs := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.starts)
	}
	var recoveries, outages []time.Duration
	for i := range restarts {
		// Mid-run: some activities have run, many wait queued.
		target := n * (i + 1) / (restarts + 2)
		require.Eventually(t, func() bool { return runs() >= target }, 2*time.Minute, 10*time.Millisecond, "%d runs before restart %d", target, i+1)
		// Every slot of the limit is held by a run that has done its work and waits at the gate, so
		// no run records its outcome while the database is down (see the comment on the test).
		g.shut()
		require.Eventually(t, func() bool { return g.waiting.Load() == maxConc }, 3*time.Minute, 5*time.Millisecond,
			"all %d slots held by runs waiting at the gate", maxConc)
		for _, w := range witnesses {
			w.arm()
		}
		stopAt := time.Now()
		require.NoError(t, cluster.Stop("fast"))
		for i, w := range witnesses {
			require.True(t, w.felt(ctx), "worker %d never failed a claim and a lease renewal while the database was down", i)
		}
		require.NoError(t, cluster.Start(), "server log:\n%s", cluster.Log(20))
		upAt := time.Now()
		for _, w := range witnesses {
			w.disarm()
		}
		g.open()
		outages = append(outages, upAt.Sub(stopAt))
		var first time.Time
		require.Eventually(t, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, st := range a.starts {
				if st.After(upAt) {
					first = st
					return true
				}
			}
			return false
		}, 2*time.Minute, 10*time.Millisecond, "an activity is admitted after restart %d", i+1)
		recoveries = append(recoveries, first.Sub(stopAt))
		t.Logf("restart %d at %s: %d runs before it; down %s; first admission %s after the stop, %s after the start",
			i+1, stopAt.Sub(start).Round(time.Millisecond), target, upAt.Sub(stopAt).Round(time.Millisecond),
			first.Sub(stopAt).Round(time.Millisecond), first.Sub(upAt).Round(time.Millisecond))
	}
	select {
	case err = <-result:
	case <-ctx.Done():
		states, _ := ticketStates(context.Background(), pool, schema)
		t.Fatalf("workflow not done: tickets by owner %v", states)
	}
	require.NoError(t, err)
	require.Equal(t, n*(n-1), sum, "every activity completed with the right result")
	twice := 0
	a.runs.Range(func(_, v any) bool {
		if v.(*atomic.Int64).Load() > 1 {
			twice++
		}
		return true
	})
	causes, _ := retryCauses(t, c, run)
	t.Logf("%d activities in %s over %d restart(s); %d runs, %d activities ran more than once; retries by last failure: %v; "+
		"peak concurrency observed by the activities %d (MaxConcurrent %d)",
		n, time.Since(start).Round(time.Millisecond), restarts, runs(), twice, causes, a.peak.Load(), maxConc)
	require.LessOrEqual(t, a.peak.Load(), int64(maxConc), "the activities' own observation of concurrency")
	faultsCheckQueue(t, ctx, q, pool)
	faultsRow(t, fmt.Sprintf("Postgres restart (fast stop, down until every worker's claim and lease renewal failed), 3 workers, %d activities", n), restarts, 0, twice,
		int(max(0, a.peak.Load()-maxConc)), fmt.Sprintf("stop -> first admission: %s (outage %s)", faultsDurations(recoveries), faultsDurations(outages)))
}

// outageWitness is a worker's log handler: it writes the records of level Error and above to
// standard error (every loop warns while the database is down), and, while armed, notes the failures
// that show the worker felt the database go: a failed claim (the Claimer's warning) and a failed
// lease renewal (the LeaseRenewer's). The one loop polls every PollInterval, the other every
// LeaseTTL/3, so both come while the database stays down.
type outageWitness struct {
	next         slog.Handler
	armed        *atomic.Bool
	claim, renew chan struct{} // receive once a claim, a renewal, failed while armed
}

func newOutageWitness() *outageWitness {
	return &outageWitness{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}),
		armed: &atomic.Bool{}, claim: make(chan struct{}, 1), renew: make(chan struct{}, 1)}
}

// arm forgets what was noted and notes the failures from now on.
func (w *outageWitness) arm() {
	for _, ch := range []chan struct{}{w.claim, w.renew} {
		select {
		case <-ch:
		default:
		}
	}
	w.armed.Store(true)
}

func (w *outageWitness) disarm() { w.armed.Store(false) }

// felt waits for a failed claim and a failed lease renewal since arm; false if ctx ends first.
func (w *outageWitness) felt(ctx context.Context) bool {
	for _, ch := range []chan struct{}{w.claim, w.renew} {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (w *outageWitness) Enabled(context.Context, slog.Level) bool { return true }

func (w *outageWitness) Handle(ctx context.Context, r slog.Record) error {
	if w.armed.Load() {
		var ch chan struct{}
		switch r.Message {
		case "sluice: claim": // internal/dispatcher's Claimer, on a failed claim
			ch = w.claim
		case "sluice: renew lease": // internal/dispatcher's LeaseRenewer, on a failed renewal
			ch = w.renew
		}
		select {
		case ch <- struct{}{}:
		default: // noted already, or not a message of interest (ch is nil)
		}
	}
	if r.Level < slog.LevelError {
		return nil
	}
	return w.next.Handle(ctx, r)
}

func (w *outageWitness) WithAttrs(as []slog.Attr) slog.Handler {
	c := *w
	c.next = w.next.WithAttrs(as)
	return &c
}

func (w *outageWitness) WithGroup(name string) slog.Handler {
	c := *w
	c.next = w.next.WithGroup(name)
	return &c
}

// faultsGate holds runs that have done their work until it is open. It starts open.
type faultsGate struct {
	mu      sync.Mutex
	ch      chan struct{} // closed while open
	waiting atomic.Int64
}

func newFaultsGate() *faultsGate {
	g := &faultsGate{ch: make(chan struct{})}
	close(g.ch)
	return g
}

func (g *faultsGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
		g.ch = make(chan struct{})
	default:
	}
}

func (g *faultsGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.ch:
	default:
		close(g.ch)
	}
}

// wait is a faultActs gate: it heartbeats while it waits.
func (g *faultsGate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	for {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			activity.RecordHeartbeat(ctx)
		}
	}
}
