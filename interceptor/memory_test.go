package interceptor_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
)

// BenchmarkPlugin_HeldMemory measures the memory a worker spends on each activity it holds while
// the activity waits for admission: a workflow fans out held activities of a type routed to a paused
// limit, and once every ticket is queued the live heap (after a GC) is compared with the heap
// before. It reports bytes per held invocation: Sluice's invocation, the SDK's activity context and
// the arguments it keeps.
func BenchmarkPlugin_HeldMemory(b *testing.B) {
	const (
		held   = 10_000
		fanOut = 2_000 // activities per workflow: one workflow task scheduling 10,000 stalls the dev server
	)
	c, queue, pool, schema := benchWorkerPool(b, 1_000_000, HeldFanOut)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	admin, err := store.New(pool, store.Options{Schema: schema})
	require.NoError(b, err)
	require.NoError(b, admin.Pause(ctx, "svc", time.Now().Add(time.Hour)))

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for b.Loop() {
		before := heap()
		for range held / fanOut {
			_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue, ID: "held-" + testdb.NewSchemaName()},
				HeldFanOut, "Fast", fanOut)
			require.NoError(b, err)
		}
		for {
			st, err := admin.Status(ctx)
			require.NoError(b, err)
			if len(st) == 1 && st[0].Queued >= held {
				break
			}
			select {
			case <-ctx.Done():
				b.Fatalf("tickets queued: %+v", st)
			case <-time.After(time.Second):
			}
		}
		after := heap()
		b.ReportMetric(float64(after-before)/held, "bytes/held")
		b.ReportMetric(float64(after)/(1<<20), "heap_MiB")
		b.Logf("%d held: heap %d -> %d bytes", held, before, after)
	}
}

// HeldFanOut is ThroughputFanOut for activities that are held, not run: their start-to-close timeout
// outlasts the time the dev server takes to dispatch thousands of them on 2 cores, so none times out
// while the heap is measured.
func HeldFanOut(ctx workflow.Context, activityType string, n int) (int, error) {
	return fanOut(ctx, time.Hour, activityType, n)
}
