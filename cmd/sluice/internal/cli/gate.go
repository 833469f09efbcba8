package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// gateFlags names gate.Options' fields as the flags that set them.
var gateFlags = strings.NewReplacer("Options.Routes", "--routes", "Options.DefaultHold", "--hold", "Options.CheckInterval", "--check-interval",
	"Options.StopTimeout", "--stop-timeout")

// gateReady is the line sluice gate prints once it serves: scripts and tests wait for it.
const gateReady = "sluice gate: serving"

func runGate(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("gate")
	address := fs.String("address", "", "the Temporal frontend as HOST:PORT (default $TEMPORAL_ADDRESS, else localhost:7233)")
	namespace := fs.String("namespace", "", "the Temporal namespace (default $TEMPORAL_NAMESPACE, else default)")
	queue := fs.String("task-queue", gate.DefaultTaskQueue, "the task queue to serve Acquire on; Release is served on QUEUE@OWNER")
	routesFile := fs.String("routes", "", "a JSON `FILE` of routes requests may name: {\"openai\": {\"limits\": [\"openai\"], \"model\": \"gpt-4o\", \"tenant_limit\": {\"key\": \"tenant:\", \"max_concurrent\": 2}}}")
	pricesFile := fs.String("prices", "", "a JSON price table `FILE` (docs/prices-example.json) for routes and requests that name a model")
	hold := durationFlag(fs, "hold", gate.DefaultHold, "how long a permit may be held when a request does not say")
	check := durationFlag(fs, "check-interval", gate.DefaultCheckInterval, "how often a held permit's workflow is checked for having closed")
	stopTimeout := durationFlag(fs, "stop-timeout", gate.DefaultStopTimeout, "on SIGTERM, how long to wait for held permits to be released")
	pooler := fs.Bool("transaction-pooler", false, "the database URL is a pooler in transaction mode (PgBouncer): keep no session state")
	listenURL := fs.String("listen-url", "", "with --transaction-pooler, a direct Postgres URL to LISTEN on (else poll)")
	pos, err := r.parse(fs, "gate", args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("gate takes no arguments, got %q", pos)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"hold", *hold}, {"check-interval", *check}} {
		if d.v <= 0 { // 0 would mean the default to gate.Options: refused, not replaced
			return usageErr("--%s must be a positive duration, got %v (leave the flag out for its default)", d.name, d.v)
		}
	}
	if *stopTimeout < 0 {
		return usageErr("--stop-timeout must be >= 0, got %v", *stopTimeout)
	}
	if *queue == "" {
		return usageErr("--task-queue must not be empty")
	}
	opts := gate.Options{TaskQueue: *queue, DefaultHold: *hold, CheckInterval: *check, StopTimeout: *stopTimeout}
	if opts.Routes, err = readRoutes(*routesFile); err != nil {
		return err
	}
	prices, err := readPrices(*pricesFile)
	if err != nil {
		return err
	}
	if err := r.connect(ctx, true); err != nil {
		return err
	}
	c, err := client.Dial(client.Options{
		HostPort:  cmp.Or(*address, r.env.Getenv("TEMPORAL_ADDRESS"), client.DefaultHostPort),
		Namespace: cmp.Or(*namespace, r.env.Getenv("TEMPORAL_NAMESPACE"), client.DefaultNamespace),
	})
	if err != nil {
		return fmt.Errorf("connect to Temporal: %w", err)
	}
	defer c.Close()
	plugin, err := interceptor.NewPlugin(interceptor.Options{Pool: r.pool, Client: c, Schema: r.g.schema, Prices: prices,
		TransactionPooler: *pooler, ListenURL: *listenURL})
	if err != nil {
		return usageErr("%v", err)
	}
	g, err := gate.New(plugin, opts)
	if err != nil {
		return usageErr("%s", gateFlags.Replace(err.Error()))
	}
	w := worker.New(c, opts.TaskQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: *stopTimeout})
	g.Register(w)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start the gate's worker: %w", err)
	}
	defer w.Stop()
	if err := g.Start(); err != nil {
		return err
	}
	fmt.Fprintf(r.env.Stdout, "%s Acquire on %q, Release on %q, schema %s\n", gateReady, opts.TaskQueue, g.ReleaseTaskQueue(), r.g.schema)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *stopTimeout+10*time.Second)
	defer cancel()
	g.Stop(sctx) // before the worker: the plugin's dispatcher runs the holds
	return nil
}

// readPrices reads the price table of --prices; nil for none.
func readPrices(file string) (*throttle.PriceTable, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErr("--prices: %v", err)
	}
	t, err := throttle.ParsePriceTable(data)
	if err != nil {
		return nil, usageErr("--prices %s: %v", file, err)
	}
	return &t, nil
}

// readRoutes reads the routes of --routes: a JSON object of gate.Route by name, unknown fields
// refused.
func readRoutes(file string) (map[string]gate.Route, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErr("--routes: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var routes map[string]gate.Route
	if err := dec.Decode(&routes); err != nil {
		return nil, usageErr("--routes %s: not a JSON object of routes: %v", file, err)
	}
	return routes, nil
}
