package interceptor_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/temporaltest"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// fastActivity is the trivial body of both activity types of the latency benchmark.
func fastActivity(_ context.Context, x int) (int, error) { return x + 1, nil }

// LatencyOne runs one activity of the type it is given.
func LatencyOne(ctx workflow.Context, activityType string) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var v int
	err := workflow.ExecuteActivity(ctx, activityType, 1).Get(ctx, &v)
	return v, err
}

// BenchmarkPlugin_AddedLatency measures the latency Sluice adds to one activity when its limit does
// not bind: one worker, a limit of 1000 concurrent that a sequential caller never reaches, and two
// activity types with the same trivial body, "Fast" routed through Sluice and "FastDirect" not.
//
// Each call is one workflow running one activity, started and awaited from the client
// (ExecuteWorkflow + Get), timed on the wall clock; the calls alternate between the two types, so
// that drift in the server or the database affects both alike. Both include the same workflow-task
// overhead, so the difference of the two distributions is what routing costs: the ticket write, the
// claim, the hand-over to the owner, the outcome write and the asynchronous completion.
//
// The work is fixed (latencyCalls calls of each type per b.Loop iteration) and b.N is not used for
// it: one iteration takes well over the default -benchtime, so b.Loop normally runs it once
// (-benchtime=Nx runs N, pooling their samples). ns/op is thus the time of a whole iteration; the
// figures to read are the reported metrics, the median and 99th percentile of each type in
// milliseconds and their differences. Options are the defaults but for the limit and the route:
// notifications, not the poll interval, drive admission.
func BenchmarkPlugin_AddedLatency(b *testing.B) {
	const (
		latencyCalls = 200 // of each type, per iteration
		warmUp       = 10  // of each type, untimed and not counted
	)
	c, queue := benchWorker(b, 1000, LatencyOne)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	types := [2]string{"Fast", "FastDirect"}
	call := func(typ string) (string, time.Duration) {
		id := "lat-" + testdb.NewSchemaName()
		start := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: id}, LatencyOne, typ)
		require.NoError(b, err)
		var v int
		require.NoError(b, run.Get(ctx, &v))
		d := time.Since(start)
		require.Equal(b, 2, v)
		return id, d
	}
	for i := range 2 * warmUp {
		call(types[i%2])
	}

	var rtt [2][]time.Duration // client round trip, by type
	var ids [2][]string
	for b.Loop() {
		for i := range 2 * latencyCalls {
			k := i % 2
			id, d := call(types[k])
			rtt[k] = append(rtt[k], d)
			ids[k] = append(ids[k], id)
		}
	}

	// Untimed: the activity's own latency as the server recorded it, scheduled to completed.
	var onServer [2][]time.Duration
	for k := range 2 {
		for _, id := range ids[k] {
			onServer[k] = append(onServer[k], scheduledToCompleted(b, ctx, c, id))
		}
	}

	report := func(prefix string, d [2][]time.Duration) {
		fast, direct := quantiles(d[0]), quantiles(d[1])
		b.ReportMetric(ms(fast.p50), prefix+"throttled_p50_ms")
		b.ReportMetric(ms(direct.p50), prefix+"direct_p50_ms")
		b.ReportMetric(ms(fast.p99), prefix+"throttled_p99_ms")
		b.ReportMetric(ms(direct.p99), prefix+"direct_p99_ms")
		b.ReportMetric(ms(fast.p50-direct.p50), prefix+"added_p50_ms")
		b.ReportMetric(ms(fast.p99-direct.p99), prefix+"added_p99_ms")
		b.Logf("%s%d calls of each: throttled %s, direct %s", prefix, len(d[0]), fast, direct)
	}
	report("", rtt)
	report("server_", onServer)
}

// benchWorker starts a worker with the plugin (one limit, "svc", of maxConcurrent, that "Fast" is
// routed to), the two activity types of the benchmarks and wf, and returns its client and task queue.
func benchWorker(b *testing.B, maxConcurrent int, wf any) (client.Client, string) {
	c, queue, _, _ := benchWorkerPool(b, maxConcurrent, wf)
	return c, queue
}

// benchWorkerPool is benchWorker, also returning the pool and schema of the plugin's tables.
func benchWorkerPool(b *testing.B, maxConcurrent int, wf any) (client.Client, string, *pgxpool.Pool, string) {
	s := temporaltest.Require(b, server)
	pool := testdb.Pool(b)
	schema := testdb.Schema(b, pool)
	queue := "q-" + testdb.NewSchemaName()
	c := s.Client(b)
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: pool, Client: c, Schema: schema,
		Limits: []throttle.Limit{{Key: "svc", MaxConcurrent: maxConcurrent}},
		Routes: map[string]sluiceinterceptor.Route{"Fast": {Limits: []string{"svc"}}},
	})
	require.NoError(b, err)
	w := worker.New(c, queue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	w.RegisterWorkflow(wf)
	w.RegisterActivityWithOptions(fastActivity, activity.RegisterOptions{Name: "Fast"})
	w.RegisterActivityWithOptions(fastActivity, activity.RegisterOptions{Name: "FastDirect"})
	require.NoError(b, w.Start())
	b.Cleanup(w.Stop)
	return c, queue, pool, schema
}

type quantileSet struct{ p50, p90, p99, max time.Duration }

func (q quantileSet) String() string {
	return fmt.Sprintf("p50 %.2fms p90 %.2fms p99 %.2fms max %.2fms", ms(q.p50), ms(q.p90), ms(q.p99), ms(q.max))
}

// quantiles returns nearest-rank percentiles of ds.
func quantiles(ds []time.Duration) quantileSet {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return quantileSet{p50: at(0.50), p90: at(0.90), p99: at(0.99), max: at(1)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// scheduledToCompleted reads, from workflow id's history, the time from its activity's scheduling to
// its completion, as the server stamped the two events.
func scheduledToCompleted(b *testing.B, ctx context.Context, c client.Client, id string) time.Duration {
	b.Helper()
	var scheduled, completed time.Time
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(b, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled = ev.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			completed = ev.GetEventTime().AsTime()
		}
	}
	require.False(b, scheduled.IsZero() || completed.IsZero(), "workflow %s has a scheduled and a completed activity", id)
	if d := completed.Sub(scheduled); d > 5*time.Second {
		it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(b, err)
			b.Logf("outlier %s: %s %s %v", id, ev.GetEventTime().AsTime().Format(time.RFC3339Nano), ev.GetEventType(), ev.GetAttributes())
		}
	}
	return completed.Sub(scheduled)
}
