package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Tenant is one tenant of the backfill and how many documents it has.
type Tenant struct {
	Name string
	Docs int
}

// SharedConfig is the shared scenario: one provider account's quota shared by a batch backfill of
// several tenants' documents and an interactive assistant, each service on its own task queue, served
// by Replicas worker processes (here, in one process) that each poll both queues.
type SharedConfig struct {
	Tenants         []Tenant // the largest first: its backfill starts first
	MinLen, MaxLen  int      // document lengths, in characters
	Seed            uint64
	TPM, RPM        float64
	MaxTokens       int64         // max_tokens of a summary
	AnswerMaxTokens int64         // max_tokens of an answer
	Questions       int           // interactive requests, one every Every
	QuestionChars   int           // their length
	Delay, Every    time.Duration // from the backfill's start to the first question; between questions
	Replicas        int
	Provider        ProviderConfig
	Modes           []string
	Progress        time.Duration // how often a progress line is printed; 0: never
	// ExplainSample has the sluice mode sample its queued tickets' explanations and their real
	// admissions (-explain-sample; see explain_sample.go).
	ExplainSample bool
	// Pooler says how the Postgres URL reaches Postgres: directly, or through a transaction pooler
	// (-transaction-pooler, -listen-url).
	Pooler poolflags.Pooler
}

// DefaultSharedConfig is the full scenario: about a minute per mode at the quota. The quota is set so
// that the run's tokens (about 118,000, as the provider counts them) bind: the floor is 57.6 s.
func DefaultSharedConfig() SharedConfig {
	return SharedConfig{
		Tenants: []Tenant{{"acme", 150}, {"globex", 30}, {"initech", 25}, {"umbrella", 20}, {"hooli", 10}},
		MinLen:  200, MaxLen: 8000, Seed: 7,
		TPM: 105_000, RPM: 600, MaxTokens: 256, AnswerMaxTokens: 128,
		Questions: 50, QuestionChars: 400, Delay: 3 * time.Second, Every: time.Second,
		Replicas: 3,
		Provider: ProviderConfig{BurstSeconds: 10, BaseLatency: 100 * time.Millisecond, PerToken: 2 * time.Millisecond},
		Modes:    []string{ModeNone, ModeTemporal, ModeSluice},
		Progress: 5 * time.Second,
	}
}

// ShortSharedConfig is a small configuration, seconds per mode, for tests.
func ShortSharedConfig() SharedConfig {
	c := DefaultSharedConfig()
	c.Tenants = []Tenant{{"acme", 14}, {"globex", 4}, {"hooli", 2}}
	c.MinLen, c.MaxLen = 200, 2000
	c.TPM, c.RPM, c.MaxTokens, c.AnswerMaxTokens = 18_000, 240, 128, 64
	c.Questions, c.QuestionChars, c.Delay, c.Every = 6, 200, time.Second, 500*time.Millisecond
	c.Provider.BaseLatency, c.Provider.PerToken = 50*time.Millisecond, time.Millisecond
	c.Progress = 0
	return c
}

// validate says what is wrong with c, naming the field.
func (c SharedConfig) validate() error {
	switch {
	case len(c.Tenants) == 0:
		return fmt.Errorf("shared scenario: Tenants must not be empty")
	case c.TPM <= 0 || c.RPM <= 0:
		return fmt.Errorf("shared scenario: TPM and RPM must be positive, got %g and %g", c.TPM, c.RPM)
	case c.Replicas < 1:
		return fmt.Errorf("shared scenario: Replicas must be >= 1, got %d", c.Replicas)
	case c.Questions < 1 || c.Every <= 0:
		return fmt.Errorf("shared scenario: Questions must be >= 1 and Every positive, got %d and %s", c.Questions, c.Every)
	}
	for _, t := range c.Tenants {
		if t.Docs < 1 {
			return fmt.Errorf("shared scenario: tenant %q: Docs must be >= 1, got %d", t.Name, t.Docs)
		}
	}
	return nil
}

// sharedWork is what one run of the scenario submits: the same in every mode.
type sharedWork struct {
	docs      map[string][]Document // by tenant
	questions []Question
	// docTokens and answerTokens are each call's tokens as the provider counts them (its prompt and
	// the completion it writes), parallel to docs and questions: the floor, the fair-share bound and
	// the temporal mode's rates are computed from them.
	docTokens    map[string][]int64
	answerTokens []int64
}

func (c SharedConfig) work() (sharedWork, error) {
	docs := map[string][]Document{}
	for i, t := range c.Tenants {
		docs[t.Name] = Documents(t.Docs, c.MinLen, c.MaxLen, c.Seed+uint64(i)+1)
	}
	return newSharedWork(docs, Questions(c.Questions, c.QuestionChars, c.Seed), c.MaxTokens, c.AnswerMaxTokens)
}

// newSharedWork is the work of docs and questions, with the provider's count of each call.
func newSharedWork(docs map[string][]Document, questions []Question, maxTokens, answerMaxTokens int64) (sharedWork, error) {
	w := sharedWork{docs: docs, questions: questions, docTokens: map[string][]int64{}}
	for tenant, ds := range docs {
		for _, d := range ds {
			p, c, err := callTokens(systemPrompt, instruction+d.Text, maxTokens)
			if err != nil {
				return sharedWork{}, err
			}
			w.docTokens[tenant] = append(w.docTokens[tenant], p+c)
		}
	}
	for _, q := range questions {
		p, c, err := callTokens(answerSystemPrompt, q.Text, answerMaxTokens)
		if err != nil {
			return sharedWork{}, err
		}
		w.answerTokens = append(w.answerTokens, p+c)
	}
	return w, nil
}

// sum is the sum of vs.
func sum(vs []int64) float64 {
	var s float64
	for _, v := range vs {
		s += float64(v)
	}
	return s
}

// SharedLimit is the sluice mode's one limit on the provider account: its request rate with a small
// burst, and its token quota with 8 seconds' worth of burst, below the provider's 10 (see SluiceLimit
// for why it must be below; the closer, the less of the provider's first burst goes unused).
func SharedLimit(c SharedConfig) throttle.Limit {
	return throttle.Limit{Key: "llm", RequestsPerSecond: c.RPM / 60, Burst: 2, TokensPerMinute: c.TPM, TokenBurst: c.TPM / 60 * 8}
}

// sharedRun is one mode's run in progress: what its clients observed.
type sharedRun struct {
	cfg      SharedConfig
	mode     string
	provider *Provider
	llm      *LLM
	queues   [2]string // batch, interactive

	start    time.Time
	mu       sync.Mutex
	tenantAt map[string]time.Duration // each tenant's backfill, from the start to its result
	latency  []time.Duration          // each answer, from the question to its answer
	batchN   int
	answered int
}

// runShared runs the scenario once in mode, with a fresh provider and task queues.
func runShared(ctx context.Context, cfg SharedConfig, mode string, work sharedWork, pool *pgxpool.Pool, q *pgqueue.Queue,
	c client.Client, progress io.Writer) (SharedResult, error) {
	pc := cfg.Provider
	pc.TPM, pc.RPM = cfg.TPM, cfg.RPM
	r := &sharedRun{cfg: cfg, mode: mode, provider: NewProvider(pc), tenantAt: map[string]time.Duration{}}
	defer r.provider.Close()
	r.llm = NewLLM(r.provider.URL(), cfg.MaxTokens)
	r.llm.answerMaxTokens = cfg.AnswerMaxTokens
	suffix := mode + "-" + randomHex(4)
	r.queues = [2]string{batchQueue + "-" + suffix, interactiveQueue + "-" + suffix}
	stop, err := r.startReplicas(c, pool, q, work)
	defer stop()
	if err != nil {
		return SharedResult{}, err
	}
	if mode == ModeSluice && progress != io.Discard {
		fmt.Fprintf(progress, "sluice: its tables are in schema %s while this mode runs (sluice status --schema %s --watch 2s)\n", q.Schema(), q.Schema())
	}
	r.start = time.Now()
	errs := make(chan error, len(cfg.Tenants)+cfg.Questions)
	var wg sync.WaitGroup
	for _, t := range cfg.Tenants {
		wg.Go(func() { errs <- r.backfill(ctx, c, t.Name, work.docs[t.Name]) })
	}
	for i, qu := range work.questions {
		at := r.start.Add(cfg.Delay + time.Duration(i)*cfg.Every)
		wg.Go(func() { errs <- r.ask(ctx, c, at, qu) })
	}
	done := make(chan struct{})
	go r.report(progress, done, len(work.questions))
	var sampler *explainSampler
	if mode == ModeSluice && cfg.ExplainSample {
		sampler = startExplainSampler(ctx, pool, q)
	}
	wg.Wait()
	close(done)
	var samples []explainSample
	var failures int
	if sampler != nil {
		samples, failures = sampler.stop(ctx)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			return SharedResult{}, err
		}
	}
	res := r.result(work)
	res.Explain, res.ExplainFailures = samples, failures
	return res, nil
}

// startReplicas starts cfg.Replicas replicas, each with a worker on both task queues (sharing one
// Sluice plugin in the sluice mode), and returns what stops them.
func (r *sharedRun) startReplicas(c client.Client, pool *pgxpool.Pool, q *pgqueue.Queue, work sharedWork) (func(), error) {
	var ws []worker.Worker
	stop := func() {
		for _, w := range ws {
			w.Stop()
		}
	}
	batchRate, answerRate := temporalRates(r.cfg, work)
	for range r.cfg.Replicas {
		var plugins []worker.Plugin
		if r.mode == ModeSluice {
			plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
				Pool: pool, Client: c, Schema: q.Schema(), TracerProvider: noop.NewTracerProvider(),
				TransactionPooler: r.cfg.Pooler.TransactionPooler, ListenURL: r.cfg.Pooler.ListenURL,
				Limits: []throttle.Limit{SharedLimit(r.cfg)}, Routes: sharedRoutes(r.cfg.MaxTokens, r.cfg.AnswerMaxTokens),
			})
			if err != nil {
				return stop, err
			}
			plugins = []worker.Plugin{plugin}
		} else if r.mode != ModeNone && r.mode != ModeTemporal {
			return stop, fmt.Errorf("unknown mode %q (want none, temporal or sluice)", r.mode)
		}
		for i, tq := range r.queues {
			opts := worker.Options{WorkerStopTimeout: 10 * time.Second, Plugins: plugins}
			if r.mode == ModeTemporal {
				// The built-in at its best: each queue's share of the quota as a server-enforced
				// rate of activity starts, for the whole task queue.
				opts.TaskQueueActivitiesPerSecond = []float64{batchRate, answerRate}[i]
			}
			w := worker.New(c, tq, opts)
			w.RegisterWorkflow(Backfill)
			w.RegisterWorkflow(Ask)
			w.RegisterActivity(r.llm)
			if err := w.Start(); err != nil {
				return stop, err
			}
			ws = append(ws, w)
		}
	}
	return stop, nil
}

// temporalRates splits the request rate between the two task queues for the temporal mode, as an
// operator who knows the workload would: the assistant gets twice its arrival rate, and the backfill
// the requests per second that the tokens left over pay for, at its documents' average cost.
func temporalRates(cfg SharedConfig, work sharedWork) (batch, answer float64) {
	answer = 2 / cfg.Every.Seconds()
	var batchTokens, docs float64
	for _, ts := range work.docTokens {
		batchTokens += sum(ts)
		docs += float64(len(ts))
	}
	answerTokensPerSecond := sum(work.answerTokens) / float64(len(work.answerTokens)) / cfg.Every.Seconds()
	batch = (cfg.TPM/60 - answerTokensPerSecond) / (batchTokens / docs)
	return min(batch, cfg.RPM/60-answer), answer
}

// backfill runs one tenant's backfill workflow and records when it ended.
func (r *sharedRun) backfill(ctx context.Context, c client.Client, tenant string, docs []Document) error {
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: r.queues[0] + "-" + tenant, TaskQueue: r.queues[0]},
		Backfill, tenant, docs)
	if err != nil {
		return err
	}
	var n int
	if err := wr.Get(ctx, &n); err != nil {
		return fmt.Errorf("backfill of %s: %w", tenant, err)
	}
	r.mu.Lock()
	r.tenantAt[tenant] = time.Since(r.start)
	r.batchN += n
	r.mu.Unlock()
	return nil
}

// ask asks q at at, as a person would, and records how long the answer took.
func (r *sharedRun) ask(ctx context.Context, c client.Client, at time.Time, q Question) error {
	select {
	case <-time.After(time.Until(at)):
	case <-ctx.Done():
		return ctx.Err()
	}
	asked := time.Now()
	wr, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", r.queues[1], q.ID), TaskQueue: r.queues[1]}, Ask, q)
	if err != nil {
		return err
	}
	if err := wr.Get(ctx, nil); err != nil {
		return fmt.Errorf("question %d: %w", q.ID, err)
	}
	r.mu.Lock()
	r.latency = append(r.latency, time.Since(asked))
	r.answered++
	r.mu.Unlock()
	return nil
}

// report prints a progress line every cfg.Progress until done.
func (r *sharedRun) report(w io.Writer, done <-chan struct{}, questions int) {
	if r.cfg.Progress <= 0 || w == nil {
		return
	}
	t := time.NewTicker(r.cfg.Progress)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ps := r.provider.Stats()
		tpm := r.provider.TokensPerMinute(10 * time.Second)
		r.mu.Lock()
		tenants, answered := len(r.tenantAt), r.answered
		r.mu.Unlock()
		fmt.Fprintf(w, "%-8s %5.0fs  summaries %4d  tenants done %d/%d  answers %3d/%d  tpm(10s) %7.0f (%3.0f%%)  429s %5d  retries %4d\n",
			r.mode, time.Since(r.start).Seconds(), r.llm.completed.Load()-int64(answered), tenants, len(r.cfg.Tenants),
			answered, questions, tpm, 100*tpm/r.cfg.TPM, ps.RateLimited, r.llm.retries.Load())
	}
}
