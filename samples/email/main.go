// Command email shows a per-tenant concurrency cap and fair share on an email-style API. A workflow
// sends a burst of emails: tenant "bigco" schedules 60 first, then, a moment later, "smallco" 10 and
// "premium" 20. The provider allows 6 sends at a time in all and each tenant 2 (a limit derived from
// the call's arguments by Route.KeyLimits); the line is shared fairly between tenants
// (Route.FairnessKey), with "premium" weighted 2 (Route.Weight). Two workers on one task queue stand
// for two replicas: the limits hold across both. At the end it prints, per tenant, the emails sent,
// the peak concurrency the provider saw and when the first and last send completed.
//
//	temporal server start-dev               # in another terminal: Temporal at localhost:7233
//	go run ./samples/email                  # against it and a local Postgres
//	go run ./samples/email -n 3             # three times the emails
//	go run ./samples/email -short           # half the emails
//	go run ./samples/email -nofair -nocaps  # what Sluice with the provider's cap alone would do
//	go run ./samples/email -provider 3      # a provider cap the tenants contend for: the weight shows
//
// With the default caps, three tenants capped at 2 fill the provider's 6 exactly, so each tenant runs
// at its own cap while it has a backlog and premium's weight has nothing to decide. It decides when
// the provider's cap binds first: with -provider below 6, or -nocaps.
//
// It takes what any program with Sluice takes: a Temporal frontend, -temporal (default
// $TEMPORAL_ADDRESS, else localhost:7233), and a Postgres, -database (default $DATABASE_URL, else
// postgres://postgres@localhost:5432/postgres?sslmode=disable). Sluice's tables go in the schema
// -schema, created if missing.
package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/throttle"
)

// defaultDatabaseURL is the Postgres of -database when DATABASE_URL is unset: a local one.
const defaultDatabaseURL = "postgres://postgres@localhost:5432/postgres?sslmode=disable"

// Email is one message to send. Tenant is who sends it: the fairness key and the per-tenant cap.
type Email struct {
	Tenant, To, Subject string
}

// Provider stands for an email API; what it records is what the provider would see.
type Provider struct {
	// Latency is how long one send takes.
	Latency time.Duration

	mu       sync.Mutex
	start    time.Time
	inFlight map[string]int
	peak     map[string]int
	total    int
	peakAll  int
	done     map[string][]time.Duration // completion times since start, per tenant
	events   []event                    // each email's enqueue and admission, since start
}

// event is one email's passage through Sluice's queue, as the activity learns it from Sluice.
type event struct {
	tenant             string
	enqueued, admitted time.Duration
}

// NewProvider returns a provider whose sends take latency.
func NewProvider(latency time.Duration) *Provider {
	return &Provider{Latency: latency, inFlight: map[string]int{}, peak: map[string]int{}, done: map[string][]time.Duration{}}
}

// Start resets the clock that completion times are measured from.
func (p *Provider) Start() {
	p.mu.Lock()
	p.start = time.Now()
	p.mu.Unlock()
}

// SendEmail is an ordinary activity. The one thing in it that knows about Sluice is optional: it asks
// how long the email waited in line, for the report (outside Sluice, Admission reports false).
func (p *Provider) SendEmail(ctx context.Context, e Email) (string, error) {
	p.mu.Lock()
	if info, ok := sluiceactivity.Admission(ctx); ok {
		now := time.Since(p.start)
		p.events = append(p.events, event{tenant: e.Tenant, enqueued: now - info.Waited, admitted: now})
	}
	p.inFlight[e.Tenant]++
	p.total++
	p.peak[e.Tenant] = max(p.peak[e.Tenant], p.inFlight[e.Tenant])
	p.peakAll = max(p.peakAll, p.total)
	p.mu.Unlock()
	select { // the API call
	case <-time.After(p.Latency):
	case <-ctx.Done():
		p.mu.Lock()
		p.inFlight[e.Tenant]--
		p.total--
		p.mu.Unlock()
		return "", ctx.Err()
	}
	p.mu.Lock()
	p.inFlight[e.Tenant]--
	p.total--
	p.done[e.Tenant] = append(p.done[e.Tenant], time.Since(p.start))
	n := len(p.done[e.Tenant])
	p.mu.Unlock()
	return fmt.Sprintf("%s-%d", e.Tenant, n), nil
}

// SendBurst schedules the emails of each wave at once, in the order given, waiting gap between
// waves, then waits for them all. It returns the number sent.
func SendBurst(ctx workflow.Context, waves [][]Email, gap time.Duration) (int, error) {
	// StartToCloseTimeout covers the wait in Sluice's queue as well as the send; Sluice heartbeats
	// queued tickets, so a HeartbeatTimeout lets Temporal notice a dead worker early.
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    10 * time.Second,
	})
	var fs []workflow.Future
	for i, wave := range waves {
		if i > 0 && gap > 0 {
			if err := workflow.Sleep(ctx, gap); err != nil {
				return 0, err
			}
		}
		for _, e := range wave {
			fs = append(fs, workflow.ExecuteActivity(ctx, "SendEmail", e))
		}
	}
	for _, f := range fs {
		if err := f.Get(ctx, nil); err != nil {
			return 0, err
		}
	}
	return len(fs), nil
}

// Tenant is one sender of the burst.
type Tenant struct {
	Name   string
	Emails int
	Weight float64 // fair-share weight; 0 means 1
}

// Config is one run.
type Config struct {
	// Tenants, in the order their emails are scheduled: the first tenant's, then, Stagger later, the
	// others'. Temporal does not hand a burst of activity tasks to the workers in the order they were
	// scheduled, so without the stagger the first tenant's emails would not reach Sluice's queue first.
	Tenants []Tenant
	Stagger time.Duration
	// ProviderCap is the provider's MaxConcurrent over all tenants; TenantCap each tenant's.
	ProviderCap, TenantCap int
	// Latency is how long one send takes.
	Latency time.Duration
	// NoFairShare drops the route's FairnessKey (and so its Weight): tickets go in arrival order.
	NoFairShare bool
	// NoTenantCaps drops the per-tenant limits.
	NoTenantCaps bool
	// Schema holds Sluice's tables; TaskQueue is the workers' task queue.
	Schema, TaskQueue string
	// Pooler says how the Postgres URL reaches Postgres: directly, or through a transaction pooler
	// (-transaction-pooler, -listen-url).
	Pooler poolflags.Pooler
}

// DefaultConfig is the sample as described above, with counts multiplied by scale.
func DefaultConfig(scale int) Config {
	return Config{
		Tenants: []Tenant{
			{Name: "bigco", Emails: 60 * scale},
			{Name: "smallco", Emails: 10 * scale},
			{Name: "premium", Emails: 20 * scale, Weight: 2},
		},
		Stagger:     time.Duration(scale) * time.Second,
		ProviderCap: 6, TenantCap: 2, Latency: 50 * time.Millisecond,
		Schema: "sluice_email", TaskQueue: "email-" + randomHex(4),
	}
}

// ShortConfig is half the default burst.
func ShortConfig() Config {
	c := DefaultConfig(1)
	for i := range c.Tenants {
		c.Tenants[i].Emails /= 2
	}
	return c
}

// TenantStats is what the provider saw of one tenant.
type TenantStats struct {
	Name        string
	Weight      float64
	Emails      int
	Peak        int
	First, Last time.Duration   // first and last completion, from the workflow's start
	Done        []time.Duration // every completion, in order
}

// Result is what one run saw.
type Result struct {
	Tenants []TenantStats // in Config.Tenants order
	Sent    int           // what the workflow returned
	Peak    int           // over all tenants
	Elapsed time.Duration
	events  []event
}

// AdmittedWhileBothQueued counts, for tenants a and b, the emails of each admitted while both had
// emails waiting in Sluice's queue: the share fair share gave each while they competed. It is
// measured from Sluice's queue rather than the wall clock, so that Temporal handing some tasks to
// the workers late does not count as a tenant having nothing to send.
func (r Result) AdmittedWhileBothQueued(a, b string) (na, nb int) {
	type edge struct {
		at     time.Duration
		tenant string
		delta  int // +1 enqueued, -1 admitted
	}
	var edges []edge
	for _, e := range r.events {
		if e.tenant == a || e.tenant == b {
			edges = append(edges, edge{e.enqueued, e.tenant, +1}, edge{e.admitted, e.tenant, -1})
		}
	}
	// By time; at a tie, enqueues first, so that an email admitted at once was queued when admitted.
	slices.SortStableFunc(edges, func(x, y edge) int { return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(y.delta, x.delta)) })
	queued := map[string]int{}
	for _, e := range edges {
		if e.delta < 0 && queued[a] > 0 && queued[b] > 0 {
			if e.tenant == a {
				na++
			} else {
				nb++
			}
		}
		queued[e.tenant] += e.delta
	}
	return na, nb
}

// Tenant returns the stats of the named tenant.
func (r Result) Tenant(name string) TenantStats {
	for _, s := range r.Tenants {
		if s.Name == name {
			return s
		}
	}
	return TenantStats{Name: name}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run sends cfg's burst through two workers with the Sluice plugin, on the Postgres at dbURL and the
// Temporal server at temporalAddr.
func run(ctx context.Context, cfg Config, dbURL, temporalAddr string) (Result, error) {
	pcfg, err := cfg.Pooler.PoolConfig(dbURL)
	if err != nil {
		return Result{}, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return Result{}, fmt.Errorf("-database: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return Result{}, fmt.Errorf("connect to the Postgres of -database: %w", err)
	}
	// The SDK's errors only: its info lines would bury the report.
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	// A minute per call rather than the SDK's 10 s: a busy machine's dev server can be slower to start
	// the workflow than that, and the sample should wait, not fail.
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: logger, RPCTimeout: time.Minute})
	if err != nil {
		return Result{}, fmt.Errorf("connect to Temporal at -temporal %q: %w", temporalAddr, err)
	}
	defer c.Close()

	weights := map[string]float64{}
	for _, t := range cfg.Tenants {
		weights[t.Name] = cmp.Or(t.Weight, 1)
	}
	tenantOf := func(_ sluiceinterceptor.ActivityInfo, args []any) string { return args[0].(Email).Tenant }
	route := sluiceinterceptor.Route{
		Limits:      []string{"email"},
		FairnessKey: tenantOf,
		Weight: func(tenant string) float64 {
			return cmp.Or(weights[tenant], 1)
		},
		KeyLimits: func(info sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
			return []throttle.Limit{{Key: "tenant:" + tenantOf(info, args), MaxConcurrent: cfg.TenantCap}}
		},
	}
	if cfg.NoFairShare {
		route.FairnessKey, route.Weight = nil, nil
	}
	if cfg.NoTenantCaps {
		route.KeyLimits = nil
	}
	p := NewProvider(cfg.Latency)
	for range 2 { // two workers, as two replicas would be
		plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
			Pool: pool, Client: c, Schema: cfg.Schema,
			Limits:            []throttle.Limit{{Key: "email", MaxConcurrent: cfg.ProviderCap}},
			Routes:            map[string]sluiceinterceptor.Route{"SendEmail": route},
			PollInterval:      200 * time.Millisecond,
			TransactionPooler: cfg.Pooler.TransactionPooler, ListenURL: cfg.Pooler.ListenURL,
		})
		if err != nil {
			return Result{}, err
		}
		w := worker.New(c, cfg.TaskQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 10 * time.Second})
		w.RegisterWorkflow(SendBurst)
		w.RegisterActivityWithOptions(p.SendEmail, activity.RegisterOptions{Name: "SendEmail"})
		if err := w.Start(); err != nil {
			return Result{}, err
		}
		defer w.Stop()
	}

	waves := make([][]Email, 2)
	for n, t := range cfg.Tenants {
		w := min(n, 1)
		for i := range t.Emails {
			waves[w] = append(waves[w], Email{Tenant: t.Name, To: fmt.Sprintf("user%d@%s.example", i, t.Name), Subject: fmt.Sprintf("Your receipt #%d", i)})
		}
	}
	p.Start()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: cfg.TaskQueue}, SendBurst, waves, cfg.Stagger)
	if err != nil {
		return Result{}, err
	}
	var sent int
	if err := wr.Get(ctx, &sent); err != nil {
		return Result{}, err
	}
	res := Result{Sent: sent, Elapsed: time.Since(p.start)}

	p.mu.Lock()
	defer p.mu.Unlock()
	res.Peak = p.peakAll
	res.events = slices.Clone(p.events)
	for _, t := range cfg.Tenants {
		done := slices.Clone(p.done[t.Name])
		slices.Sort(done)
		s := TenantStats{Name: t.Name, Weight: weights[t.Name], Emails: len(done), Peak: p.peak[t.Name], Done: done}
		if len(done) > 0 {
			s.First, s.Last = done[0], done[len(done)-1]
		}
		res.Tenants = append(res.Tenants, s)
	}
	return res, nil
}

// report prints the per-tenant table and what it shows.
func report(out io.Writer, cfg Config, res Result) {
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tweight\temails\tpeak\tfirst done\tlast done\t")
	for _, s := range res.Tenants {
		fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%s\t%s\t\n", s.Name, s.Weight, s.Emails, s.Peak, sec(s.First), sec(s.Last))
	}
	_ = tw.Flush()
	total := 0
	for _, s := range res.Tenants {
		total += s.Emails
	}
	caps := fmt.Sprintf("%d per tenant", cfg.TenantCap)
	if cfg.NoTenantCaps {
		caps = "no tenant caps"
	}
	fair := "fair share by tenant"
	if cfg.NoFairShare {
		fair = "no fair share"
	}
	fmt.Fprintf(out, "%d emails in %s over two workers; overall peak %d (provider cap %d, %s, %s); times from the workflow's start\n",
		total, sec(res.Elapsed), res.Peak, cfg.ProviderCap, caps, fair)
	big, small, prem := res.Tenant("bigco"), res.Tenant("smallco"), res.Tenant("premium")
	if small.Emails > 0 && prem.Emails > 0 && !cfg.NoFairShare {
		np, ns := res.AdmittedWhileBothQueued("premium", "smallco")
		fmt.Fprintf(out, "while both had emails queued, Sluice admitted %d of premium's (weight %g) and %d of smallco's\n", np, prem.Weight, ns)
	}
	if big.Emails > 0 && small.Emails > 0 {
		if cfg.NoFairShare && cfg.NoTenantCaps {
			fmt.Fprintf(out, "smallco was done at %s, bigco at %s: in arrival order, on the provider's cap alone, smallco waited behind bigco's %d emails\n",
				sec(small.Last), sec(big.Last), big.Emails)
		} else {
			fmt.Fprintf(out, "smallco was done at %s, bigco at %s: without fair share or tenant caps (-nofair -nocaps) smallco would wait behind all %d of bigco's emails\n",
				sec(small.Last), sec(big.Last), big.Emails)
		}
	}
}

// mainErr runs the sample as the flags say.
func mainErr() error {
	n := flag.Int("n", 1, "scale factor: bigco sends 60×n emails, smallco 10×n, premium 20×n")
	short := flag.Bool("short", false, "half the default burst (ignores -n)")
	providerCap := flag.Int("provider", 6, "the provider's concurrency cap over all tenants")
	noFair := flag.Bool("nofair", false, "no fair share (no FairnessKey, so no Weight): tickets in arrival order")
	noCaps := flag.Bool("nocaps", false, "no per-tenant caps (no KeyLimits)")
	stagger := flag.Duration("stagger", 0, "how long after bigco's emails the others' are scheduled (default n seconds)")
	schema := flag.String("schema", "sluice_email", "Postgres schema for Sluice's tables")
	temporalAddr := flag.String("temporal", "", "the Temporal frontend, host:port (default $TEMPORAL_ADDRESS, else "+client.DefaultHostPort+")")
	// DATABASE_URL is read after parsing, not made the flag's default, so that -h does not print it.
	databaseURL := flag.String("database", "", "the Postgres URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	pooler, err := poolflags.Define(flag.CommandLine)
	if err != nil {
		return err
	}
	flag.Parse()
	if *n < 1 {
		return fmt.Errorf("-n must be >= 1, got %d", *n)
	}
	cfg := DefaultConfig(*n)
	if *short {
		cfg = ShortConfig()
	}
	cfg.ProviderCap, cfg.Schema, cfg.NoFairShare, cfg.NoTenantCaps = *providerCap, *schema, *noFair, *noCaps
	cfg.Pooler = pooler()
	if *stagger > 0 {
		cfg.Stagger = *stagger
	}

	addr := cmp.Or(*temporalAddr, os.Getenv("TEMPORAL_ADDRESS"), client.DefaultHostPort)
	db := cmp.Or(*databaseURL, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
	res, err := run(context.Background(), cfg, db, addr)
	if err != nil {
		return err
	}
	report(os.Stdout, cfg, res)
	return nil
}

func main() {
	if err := mainErr(); err != nil {
		log.Fatal(err)
	}
}
