package main

// The TypeScript scenario (-scenario typescript, make demo-typescript): the fan-out's documents
// summarised by a TypeScript workflow (samples/typescript) in node workers, every call to the
// provider admitted by a Sluice gate through withSluice. The gate is hosted here, in a Go worker
// with the plugin, on the limit the fan-out's sluice mode uses.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/sluicehq/sluice/gate"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// DefaultTSWorker is the TypeScript sample's compiled worker, from the repository's root
// (make demo-typescript builds it: cd samples/typescript && npm ci && npm run build).
const DefaultTSWorker = "samples/typescript/dist/worker.js"

// tsRoute is the gate's route the TypeScript workflow names.
const tsRoute = "openai"

// TSConfig is the TypeScript scenario: the fan-out's documents and quota, and the node workers.
type TSConfig struct {
	Config
	Node     string // the node binary
	WorkerJS string // the sample's compiled worker
	Workers  int    // node worker processes
}

// TSResult is what the TypeScript scenario achieved.
type TSResult struct {
	Scenario string `json:"scenario"` // "typescript"
	// Completed counts the documents summarised; Calls the requests the provider received.
	Completed int   `json:"completed"`
	Calls     int64 `json:"calls"`
	// RateLimited counts the 429s the provider sent (the workflow's own count is WorkflowRateLimited).
	RateLimited         int64 `json:"rate_limited"`
	WorkflowRateLimited int64 `json:"workflow_rate_limited"`
	// PeakRequests1s is the most requests the provider received in any second; PeakTokens60s the
	// most tokens it accepted in any minute (the whole run's, when shorter).
	PeakRequests1s int64 `json:"peak_requests_1s"`
	PeakTokens60s  int64 `json:"peak_tokens_60s"`
	// Tokens counts the tokens the provider accepted; QuotaShare is 100 x Tokens / (TPM x wall minutes).
	Tokens     int64   `json:"tokens"`
	QuotaShare float64 `json:"quota_share_pct"`
	// WallSeconds is from the workflow's start to its result; FloorSeconds the least the quota allows.
	WallSeconds  float64 `json:"wall_s"`
	FloorSeconds float64 `json:"floor_s"`
	// MaxWaitedSeconds is the longest a call waited in line for its permit.
	MaxWaitedSeconds float64 `json:"max_waited_s"`
}

// tsInput and tsOutput are summarizeAll's input and output (samples/typescript/src/workflows.ts).
type tsInput struct {
	Docs          []tsDoc `json:"docs"`
	MaxTokens     int64   `json:"maxTokens"`
	Route         string  `json:"route"`
	GateTaskQueue string  `json:"gateTaskQueue"`
}

type tsDoc struct {
	ID   int    `json:"id"`
	Text string `json:"text"`
}

type tsOutput struct {
	Completed   int   `json:"completed"`
	RateLimited int64 `json:"rateLimited"`
	Tokens      int64 `json:"tokens"`
	MaxWaitedMS int64 `json:"maxWaitedMs"`
}

// runTypeScript runs the TypeScript scenario once against the Postgres at dbURL and the Temporal
// server at temporalAddr, printing progress to progress.
func runTypeScript(ctx context.Context, cfg TSConfig, dbURL, temporalAddr string, progress io.Writer) (TSResult, error) {
	if cfg.Workers < 1 || cfg.Workers > maxTSWorkers {
		return TSResult{}, fmt.Errorf("-ts-workers must be from 1 to %d, got %d", maxTSWorkers, cfg.Workers)
	}
	if _, err := os.Stat(cfg.WorkerJS); err != nil {
		return TSResult{}, fmt.Errorf("-ts-worker: %w (build it: cd samples/typescript && npm ci && npm run build)", err)
	}
	var res TSResult
	err := withDemoEnv(ctx, dbURL, cfg.Pooler, temporalAddr, func(pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client) error {
		var err error
		res, err = runTypeScriptIn(ctx, cfg, pool, q, c, temporalAddr, progress)
		return err
	})
	return res, err
}

func runTypeScriptIn(ctx context.Context, cfg TSConfig, pool *pgxpool.Pool, q *pgqueue.Queue, c client.Client,
	temporalAddr string, progress io.Writer) (TSResult, error) {
	pc := cfg.Provider
	pc.TPM, pc.RPM = cfg.TPM, cfg.RPM
	provider := NewProvider(pc)
	defer provider.Close()
	name := randomHex(4)
	gateQueue, tsQueue := "sluice-gate-"+name, "llm-ts-"+name

	// The gate: a Go worker with the plugin, serving Acquire on gateQueue and Release on its own.
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: pool, Client: c, Schema: q.Schema(), TracerProvider: noop.NewTracerProvider(),
		TransactionPooler: cfg.Pooler.TransactionPooler, ListenURL: cfg.Pooler.ListenURL,
		Limits: []throttle.Limit{SluiceLimit(cfg.Config)},
	})
	if err != nil {
		return TSResult{}, err
	}
	g, err := gate.New(plugin, gate.Options{TaskQueue: gateQueue, Routes: map[string]gate.Route{tsRoute: {Limits: []string{"llm"}}}})
	if err != nil {
		return TSResult{}, err
	}
	gw := worker.New(c, gateQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 10 * time.Second})
	g.Register(gw)
	if err := gw.Start(); err != nil {
		return TSResult{}, err
	}
	defer gw.Stop()
	if err := g.Start(); err != nil {
		return TSResult{}, err
	}
	defer func() { // before the worker: the plugin's dispatcher runs the holds
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		g.Stop(sctx)
	}()

	for range max(1, cfg.Workers) {
		w, err := startNodeWorker(cfg, temporalAddr, tsQueue, provider.URL())
		if err != nil {
			return TSResult{}, err
		}
		defer w.stop()
	}

	in := tsInput{MaxTokens: cfg.MaxTokens, Route: tsRoute, GateTaskQueue: gateQueue}
	for _, d := range Documents(cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Seed) {
		in.Docs = append(in.Docs, tsDoc{ID: d.ID, Text: d.Text})
	}
	start := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: tsQueue, TaskQueue: tsQueue,
		WorkflowExecutionTimeout: 30 * time.Minute}, "summarizeAll", in)
	if err != nil {
		return TSResult{}, err
	}
	stop := startProgress(cfg.Progress, progress, func() {
		ps := provider.Stats()
		tpm := provider.TokensPerMinute(cfg.Window)
		fmt.Fprintf(progress, "typescript %5.0fs  done %3d/%d  in flight %3d  tpm(last %s) %7.0f (%3.0f%%)  429s %d\n",
			time.Since(start).Seconds(), ps.Succeeded, cfg.Docs, ps.Inflight, cfg.Window, tpm, 100*tpm/cfg.TPM, ps.RateLimited)
	})
	var out tsOutput
	err = wr.Get(ctx, &out)
	wall := time.Since(start)
	stop()
	if err != nil {
		return TSResult{}, fmt.Errorf("the TypeScript workflow: %w", err)
	}
	ps := provider.Stats()
	return TSResult{
		Scenario: "typescript", Completed: out.Completed, Calls: ps.Requests,
		RateLimited: ps.RateLimited, WorkflowRateLimited: out.RateLimited,
		PeakRequests1s: provider.PeakRequests(time.Second), PeakTokens60s: provider.PeakTokens(time.Minute),
		Tokens: ps.Tokens, QuotaShare: round(100*float64(ps.Tokens)/(cfg.TPM*wall.Minutes()), 1),
		WallSeconds: round(wall.Seconds(), 1), FloorSeconds: round(fanoutFloor(cfg.Config, ps.Tokens), 1),
		MaxWaitedSeconds: round(float64(out.MaxWaitedMS)/1000, 1),
	}, nil
}

// maxTSWorkers bounds -ts-workers: each is a node process on this machine.
const maxTSWorkers = 32

// startProgress calls line every period until the returned function is called; never for period 0.
func startProgress(period time.Duration, progress io.Writer, line func()) (stop func()) {
	if period <= 0 || progress == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				line()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// nodeWorker is a running node worker of the TypeScript sample.
type nodeWorker struct {
	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	output []string
}

// startNodeWorker starts a worker of the sample on queue and waits until it polls.
func startNodeWorker(cfg TSConfig, temporalAddr, queue, providerURL string) (*nodeWorker, error) {
	w := &nodeWorker{exited: make(chan struct{})}
	ready := make(chan struct{})
	var once sync.Once
	w.cmd = exec.Command(cfg.Node, cfg.WorkerJS)
	w.cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+temporalAddr, "TASK_QUEUE="+queue, "PROVIDER_URL="+providerURL)
	w.cmd.Stdout = &lineWriter{f: func(line string) {
		if line == "READY" {
			once.Do(func() { close(ready) })
		}
		w.keep(line)
	}}
	w.cmd.Stderr = &lineWriter{f: w.keep}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the TypeScript worker: %w", err)
	}
	var waitErr error
	go func() {
		waitErr = w.cmd.Wait()
		close(w.exited)
	}()
	select {
	case <-ready:
		return w, nil
	case <-w.exited:
		return nil, fmt.Errorf("the TypeScript worker exited before it polled (%v):\n%s", waitErr, w.lines())
	case <-time.After(3 * time.Minute):
		w.stop()
		return nil, errors.New("the TypeScript worker did not poll within 3 minutes")
	}
}

func (w *nodeWorker) keep(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.output = append(w.output, line)
}

func (w *nodeWorker) lines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.output, "\n")
}

// stop sends SIGTERM and waits for the worker to exit, killing it after a minute.
func (w *nodeWorker) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(time.Minute):
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
}

// lineWriter calls f with each complete line written to it (exec copies a stream in one goroutine).
type lineWriter struct {
	f   func(line string)
	buf []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.f(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
