package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/sluicehq/sluice/gate"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// A Go program hosts a gate in a worker it already has: the gate's tickets are its plugin's. (The
// sluice gate command does the same.)
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{Pool: pool, Client: c,
		Limits: []throttle.Limit{{Key: "openai", MaxConcurrent: 50, RequestsPerSecond: 10, TokensPerMinute: 90_000}}})
	if err != nil {
		log.Fatal(err)
	}
	g, err := gate.New(plugin, gate.Options{Routes: map[string]gate.Route{"openai": {Limits: []string{"openai"}}}})
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, gate.DefaultTaskQueue, worker.Options{Plugins: []worker.Plugin{plugin}})
	g.Register(w) // Acquire, on the worker's task queue
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	if err := g.Start(); err != nil { // Release, on the gate's own queue
		log.Fatal(err)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g.Stop(sctx) // before the worker: the plugin's dispatcher runs the held permits
}

// The contract's payloads are JSON, so that a workflow in any SDK writes and reads them with its
// default converter.
func ExampleAcquireRequest() {
	req := gate.AcquireRequest{Version: gate.ContractVersion, Route: "openai", Tokens: 1200, Tenant: "acme", MaxHoldMS: 120_000}
	b, _ := json.Marshal(req)
	fmt.Println(gate.AcquireActivity, string(b))
	used := int64(950)
	rel := gate.ReleaseRequest{Version: gate.ContractVersion, Permit: gate.Permit{TicketID: 42, Holder: "sluice@host:1/ab"}, Tokens: &used}
	b, _ = json.Marshal(rel)
	fmt.Println(gate.ReleaseActivity, string(b))
	// Output:
	// sluice.gate.v1.Acquire {"version":1,"route":"openai","tokens":1200,"tenant":"acme","max_hold_ms":120000}
	// sluice.gate.v1.Release {"version":1,"permit":{"version":0,"ticket_id":42,"holder":"sluice@host:1/ab","release_task_queue":"","limits":null,"admitted_at":"0001-01-01T00:00:00Z","expires_at":"0001-01-01T00:00:00Z","waited_ms":0},"tokens":950}
}

// A Go workflow may use a gate too, through the same contract: Acquire on the gate's task queue, the
// call, then Release on the permit's queue.
func ExamplePermit() {
	_ = func(ctx workflow.Context, doc string) error {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: gate.DefaultTaskQueue,
			StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: 30 * time.Second})
		var permit gate.Permit
		req := gate.AcquireRequest{Version: gate.ContractVersion, Route: "openai", Tokens: int64(len(doc) / 4)}
		if err := workflow.ExecuteActivity(actx, gate.AcquireActivity, req).Get(ctx, &permit); err != nil {
			return err
		}
		used := int64(0) // what the call reported
		// ... the call ...
		rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: permit.ReleaseTaskQueue,
			ScheduleToStartTimeout: time.Minute, StartToCloseTimeout: time.Minute})
		return workflow.ExecuteActivity(rctx, gate.ReleaseActivity,
			gate.ReleaseRequest{Version: gate.ContractVersion, Permit: permit, Tokens: &used}).Get(ctx, nil)
	}
}
