package interceptor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// ThroughputFanOut runs n activities of the type it is given at once and waits for them all.
func ThroughputFanOut(ctx workflow.Context, activityType string, n int) (int, error) {
	return fanOut(ctx, 5*time.Minute, activityType, n)
}

// fanOut runs n activities of activityType at once, each with the start-to-close timeout given, and
// returns the sum of their results.
func fanOut(ctx workflow.Context, startToClose time.Duration, activityType string, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: startToClose})
	fs := make([]workflow.Future, n)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity(ctx, activityType, i)
	}
	sum := 0
	for _, f := range fs {
		var v int
		if err := f.Get(ctx, &v); err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// BenchmarkPlugin_Throughput measures activities per second through Temporal, throttled by a limit
// that does not bind ("Fast", routed through Sluice) beside unthrottled ("FastDirect"), with the
// same trivial body, on the same worker and dev server. Each round is one workflow fanning out
// fanOut activities of one type, timed from start to result; the rounds alternate between the two
// types. It reports each type's median activities per second and their ratio. As with the latency
// benchmark, b.Loop normally runs once; -benchtime=Nx pools N.
func BenchmarkPlugin_Throughput(b *testing.B) {
	const (
		fanOut = 500
		rounds = 5 // of each type, per iteration
	)
	c, queue := benchWorker(b, 10_000, ThroughputFanOut)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	run := func(typ string, n int) float64 {
		start := time.Now()
		wf, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "fan-" + testdb.NewSchemaName()}, ThroughputFanOut, typ, n)
		require.NoError(b, err)
		var sum int
		require.NoError(b, wf.Get(ctx, &sum))
		require.Equal(b, n*(n+1)/2, sum)
		return float64(n) / time.Since(start).Seconds()
	}
	run("Fast", 50) // warm up both paths
	run("FastDirect", 50)

	var rates [2][]float64
	types := [2]string{"Fast", "FastDirect"}
	for b.Loop() {
		for i := range 2 * rounds {
			k := i % 2
			rates[k] = append(rates[k], run(types[k], fanOut))
		}
	}
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	throttled, direct := med(rates[0]), med(rates[1])
	b.ReportMetric(throttled, "throttled_activities/s")
	b.ReportMetric(direct, "direct_activities/s")
	b.ReportMetric(throttled/direct, "ratio")
	b.Logf("%d rounds of %d activities: throttled %v/s, direct %v/s", rounds, fanOut, rates[0], rates[1])
}
