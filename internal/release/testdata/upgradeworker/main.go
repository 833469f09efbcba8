// Command upgradeworker is the worker of the rolling-upgrade test (internal/release): the same
// program is built against the last release's tree and against the working tree, so it uses only
// the API both have: pgqueue.Migrate, interceptor.NewPlugin with its Options and Routes, and
// throttle.Limit. Keep it to that API, so that it builds against every release it is tested from.
//
// It reads UPGRADE_DATABASE_URL, UPGRADE_TEMPORAL, UPGRADE_SCHEMA, UPGRADE_QUEUE and UPGRADE_NAME,
// and writes to stdout, one line each:
//
//	MIGRATED version=<n> applied=<v,v,...>   once pgqueue.Migrate has returned (applied may be empty)
//	OWNER <owner>                           once the plugin exists
//	READY                                   once the worker has started
//	STOPPED                                 once w.Stop() has returned, after SIGTERM
//
// Each run of the Work activity is a row of <schema>.upgrade_run (the test creates the table): its
// start, and its end once the work is done (done = true is the activity's side effect). It exits 2 on
// a setup error, and 3 when its stdin closes (the test is gone).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// The limits of the test: a cap of 3 on "svc" and a rate of 20 a second on "api"; Work draws on both.
var limits = []throttle.Limit{
	{Key: "svc", MaxConcurrent: 3},
	{Key: "api", RequestsPerSecond: 20, Burst: 4},
}

// hold is how long each run of Work takes.
const hold = 150 * time.Millisecond

// FlowInput is UpgradeFlow's argument.
type FlowInput struct{ Base, N int }

// UpgradeFlow runs N Work activities at once, on Base..Base+N-1, and returns the sum of their
// results.
func UpgradeFlow(ctx workflow.Context, in FlowInput) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: 5 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1},
	})
	fs := make([]workflow.Future, in.N)
	for i := range fs {
		fs[i] = workflow.ExecuteActivity(ctx, "Work", in.Base+i)
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

type acts struct {
	pool        *pgxpool.Pool
	table, proc string
}

// Work records its run, holds, records its end (the side effect) and returns 2*x.
func (a *acts) Work(ctx context.Context, x int) (int, error) {
	info := activity.GetInfo(ctx)
	key := info.WorkflowExecution.ID + "/" + info.ActivityID
	var id int64
	if err := a.pool.QueryRow(ctx, `INSERT INTO `+a.table+` (act, proc, attempt) VALUES ($1, $2, $3) RETURNING id`,
		key, a.proc, info.Attempt).Scan(&id); err != nil {
		return 0, err
	}
	activity.RecordHeartbeat(ctx, x)
	select {
	case <-ctx.Done():
		_, _ = a.pool.Exec(context.WithoutCancel(ctx), `UPDATE `+a.table+` SET finished_at = clock_timestamp() WHERE id = $1`, id)
		return 0, ctx.Err()
	case <-time.After(hold):
	}
	if _, err := a.pool.Exec(ctx, `UPDATE `+a.table+` SET finished_at = clock_timestamp(), done = true WHERE id = $1`, id); err != nil {
		return 0, err
	}
	return 2 * x, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "upgradeworker:", err)
		os.Exit(2)
	}
}

func run() error {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		fmt.Fprintln(os.Stderr, "upgradeworker: stdin closed; the test is gone")
		os.Exit(3)
	}()
	url, addr := os.Getenv("UPGRADE_DATABASE_URL"), os.Getenv("UPGRADE_TEMPORAL")
	schema, queue, name := os.Getenv("UPGRADE_SCHEMA"), os.Getenv("UPGRADE_QUEUE"), os.Getenv("UPGRADE_NAME")
	if url == "" || addr == "" || schema == "" || queue == "" || name == "" {
		return fmt.Errorf("UPGRADE_DATABASE_URL, UPGRADE_TEMPORAL, UPGRADE_SCHEMA, UPGRADE_QUEUE and UPGRADE_NAME must all be set")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "sluice-upgrade-" + name
	cfg.MaxConns = 3 // a replica needs 2 and its listener: five of them stay light on the test database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	// A replica migrates at start, as NewPlugin's worker does; done here first to say what it applied.
	res, err := pgqueue.Migrate(ctx, pool, pgqueue.MigrateOptions{Schema: schema})
	if err != nil {
		return err
	}
	applied := make([]string, len(res.Applied))
	for i, v := range res.Applied {
		applied[i] = strconv.Itoa(v)
	}
	fmt.Printf("MIGRATED version=%d applied=%s\n", res.Version, strings.Join(applied, ","))

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A busy machine's dev server may take longer than the SDK's default 10 s per call.
	c, err := client.Dial(client.Options{HostPort: addr, Logger: sdklog.NewStructuredLogger(logger), RPCTimeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	defer c.Close()
	route := sluiceinterceptor.Route{Limits: []string{"svc", "api"}}
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: pool, Client: c, Schema: schema, Limits: limits,
		Routes:   map[string]sluiceinterceptor.Route{"Work": route},
		Identity: fmt.Sprintf("sluice-upgrade-%s@%d", name, os.Getpid()),
		Logger:   logger, LeaseTTL: 3 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	fmt.Printf("OWNER %s\n", plugin.Owner())
	w := worker.New(c, queue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 5 * time.Second})
	w.RegisterWorkflow(UpgradeFlow)
	w.RegisterActivity(&acts{pool: pool, table: pgx.Identifier{schema, "upgrade_run"}.Sanitize(), proc: name})
	if err := w.Start(); err != nil {
		return err
	}
	fmt.Println("READY")
	<-ctx.Done()
	w.Stop()
	fmt.Println("STOPPED")
	return nil
}
