package gate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/sluicehq/sluice/gate"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/throttle"
)

// The gate's added latency per call, from TypeScript (make bench-gate): a workflow of the client's
// test worker calls a trivial activity one call at a time, alternately bare and through withSluice
// on a limit that does not bind, and the figures are read from the history's event timestamps (the
// Temporal server's clock):
//
//   - call: the bare call, its ActivityTaskScheduled to its ActivityTaskCompleted;
//   - added: what withSluice adds to a call, from its Acquire's ActivityTaskScheduled to its
//     Release's ActivityTaskCompleted, less its own call's span: Acquire, Release, and the two
//     workflow tasks that schedule the call and the Release;
//   - acquire, release: each activity's span alone.
//
// Each repeat runs latencyCalls pairs, the first latencyWarmup left out; the figures are the
// medians over the repeats of each repeat's p50 and p99.
const (
	latencyCalls   = 200
	latencyWarmup  = 5
	latencyRepeats = 3
)

// latencyInput is the input of the TypeScript workflow latency (clients/typescript/test/workflows.ts).
type latencyInput struct {
	Request       gate.AcquireRequest `json:"request"`
	GateTaskQueue string              `json:"gateTaskQueue"`
	Calls         int                 `json:"calls"`
}

// latencyFigures are one repeat's percentiles, in milliseconds.
type latencyFigures struct {
	callP50, callP99, addedP50, addedP99, acquireP50, acquireP99, releaseP50, releaseP99 float64
	load                                                                                 string
}

func BenchmarkGate_TypeScriptLatency(b *testing.B) {
	node := requireNode(b)
	calls, repeats := latencyCalls, latencyRepeats
	if testing.Short() {
		calls, repeats = 20, 1
	}
	// Limits that do not bind: calls go one at a time, far below each.
	e := newEnv(b, throttle.Limit{Key: "svc", MaxConcurrent: 100, RequestsPerSecond: 1000, TokensPerMinute: 1e9})
	startDefaultGate(b, e)
	hp := e.startHTTPProvider(b)
	tsQueue := "ts-" + testdb.NewSchemaName()
	e.startTSWorker(b, node, tsQueue, hp.URL)
	in := latencyInput{Request: gate.AcquireRequest{Version: gate.ContractVersion, Limits: []string{"svc"}, Tokens: 100},
		GateTaskQueue: e.gateQueue, Calls: calls}

	var rs []latencyFigures
	b.ResetTimer()
	for range b.N {
		rs = rs[:0]
		for range repeats {
			before := loadAverage()
			run, err := e.c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: tsQueue,
				ID: "latency-" + testdb.NewSchemaName(), WorkflowExecutionTimeout: 30 * time.Minute}, "latency", in)
			require.NoError(b, err)
			require.NoError(b, run.Get(context.Background(), nil))
			f := e.latencyOf(b, run, calls)
			f.load = before + " -> " + loadAverage()
			rs = append(rs, f)
		}
	}
	b.StopTimer()

	med := func(get func(latencyFigures) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	var tb strings.Builder
	fmt.Fprintf(&tb, "%d calls of each kind per repeat (the first %d left out), ms, from the history's timestamps:\n", calls, latencyWarmup)
	fmt.Fprintf(&tb, "%-8s | %-19s | %-19s | %-15s | %-15s | %s\n", "repeat", "call p50 / p99", "added p50 / p99", "acquire p50 / p99", "release p50 / p99", "load (1 5 15 min) before -> after")
	for i, r := range rs {
		fmt.Fprintf(&tb, "%-8d | %8.1f / %8.1f | %8.1f / %8.1f | %6.1f / %6.1f | %6.1f / %6.1f | %s\n", i+1,
			r.callP50, r.callP99, r.addedP50, r.addedP99, r.acquireP50, r.acquireP99, r.releaseP50, r.releaseP99, r.load)
	}
	fmt.Fprintf(&tb, "%-8s | %8.1f / %8.1f | %8.1f / %8.1f | %6.1f / %6.1f | %6.1f / %6.1f |\n", "median",
		med(func(r latencyFigures) float64 { return r.callP50 }), med(func(r latencyFigures) float64 { return r.callP99 }),
		med(func(r latencyFigures) float64 { return r.addedP50 }), med(func(r latencyFigures) float64 { return r.addedP99 }),
		med(func(r latencyFigures) float64 { return r.acquireP50 }), med(func(r latencyFigures) float64 { return r.acquireP99 }),
		med(func(r latencyFigures) float64 { return r.releaseP50 }), med(func(r latencyFigures) float64 { return r.releaseP99 }))
	b.Log("\n" + tb.String())
	b.ReportMetric(med(func(r latencyFigures) float64 { return r.callP50 }), "call_p50_ms")
	b.ReportMetric(med(func(r latencyFigures) float64 { return r.callP99 }), "call_p99_ms")
	b.ReportMetric(med(func(r latencyFigures) float64 { return r.addedP50 }), "added_p50_ms")
	b.ReportMetric(med(func(r latencyFigures) float64 { return r.addedP99 }), "added_p99_ms")
	b.ReportMetric(0, "ns/op")
}

// startDefaultGate starts a gate on e.gateQueue whose plugin has the default options (the tests'
// poll and heartbeat intervals are shorter), stopped at the end.
func startDefaultGate(b *testing.B, e *env) {
	b.Helper()
	e.startGateWith(b, sluiceinterceptor.Options{Pool: e.pool, Client: e.c, Schema: e.schema,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, gate.Options{})
}

// latencyOf reads run's history: its activities in order, noop (bare), Acquire, noop (gated),
// Release, calls times over, and returns the percentiles of their spans past the warm-up.
func (e *env) latencyOf(b *testing.B, run client.WorkflowRun, calls int) latencyFigures {
	b.Helper()
	type act struct {
		name                 string
		scheduled, completed time.Time
	}
	var acts []*act
	byID := map[int64]*act{}
	it := e.c.GetWorkflowHistory(context.Background(), run.GetID(), run.GetRunID(), false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(b, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			x := &act{name: a.GetActivityType().GetName(), scheduled: ev.GetEventTime().AsTime()}
			acts = append(acts, x)
			byID[ev.GetEventId()] = x
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			byID[a.GetScheduledEventId()].completed = ev.GetEventTime().AsTime()
		}
	}
	require.Len(b, acts, 4*calls)
	var call, added, acquire, release []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for i := latencyWarmup; i < calls; i++ {
		bare, acq, gated, rel := acts[4*i], acts[4*i+1], acts[4*i+2], acts[4*i+3]
		require.Equal(b, []string{"noop", gate.AcquireActivity, "noop", gate.ReleaseActivity}, []string{bare.name, acq.name, gated.name, rel.name})
		call = append(call, ms(bare.completed.Sub(bare.scheduled)))
		added = append(added, ms(rel.completed.Sub(acq.scheduled)-gated.completed.Sub(gated.scheduled)))
		acquire = append(acquire, ms(acq.completed.Sub(acq.scheduled)))
		release = append(release, ms(rel.completed.Sub(rel.scheduled)))
	}
	return latencyFigures{
		callP50: pct(call, 50), callP99: pct(call, 99), addedP50: pct(added, 50), addedP99: pct(added, 99),
		acquireP50: pct(acquire, 50), acquireP99: pct(acquire, 99), releaseP50: pct(release, 50), releaseP99: pct(release, 99),
	}
}

// pct is the p-th percentile of vs, nearest rank.
func pct(vs []float64, p int) float64 {
	s := slices.Sorted(slices.Values(vs))
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

// loadAverage is the machine's load averages over 1, 5 and 15 minutes, or "?" where unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
