package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	sluiceactivity "github.com/sluicehq/sluice/activity"
	sluiceinterceptor "github.com/sluicehq/sluice/interceptor"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Question is one call to the provider, for a tenant.
type Question struct {
	Tenant                    string
	N                         int
	Prompt, Cached, MaxTokens int64
}

// Answer is what a call used, as the provider reported it, and its price.
type Answer struct {
	Usage throttle.Usage
	Money int64 // micro-units of the price table's currency
}

// Asked is how a tenant's batch of questions went: the answers' usage, and the refusals.
type Asked struct {
	Answered int
	Tokens   int64 // input and output, as reported
	Money    int64 // their price, in micro-units
	Refused  int
	// FirstRefusal is the first refusal's message, and Spent its detail.
	FirstRefusal string
	Spent        *sluiceactivity.AllowanceSpent
}

// AskAll asks a tenant's questions at once and counts what was answered and refused: a refusal for a
// spent allowance is what the product tells its user ("your plan's daily allowance resets at ..."),
// not an error of the workflow.
func AskAll(ctx workflow.Context, qs []Question) (Asked, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		ScheduleToCloseTimeout: 2 * time.Hour, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}})
	fs := make([]workflow.Future, len(qs))
	for i, q := range qs {
		fs[i] = workflow.ExecuteActivity(ctx, "Ask", q)
	}
	var res Asked
	for _, f := range fs {
		var a Answer
		err := f.Get(ctx, &a)
		if spent, ok := sluiceactivity.AsAllowanceSpent(err); ok {
			res.Refused++
			if res.Spent == nil {
				var appErr *temporal.ApplicationError
				errors.As(err, &appErr)
				res.FirstRefusal, res.Spent = appErr.Message(), &spent
			}
			continue
		}
		if err != nil {
			return res, err
		}
		res.Answered++
		res.Tokens += a.Usage.Input + a.Usage.Output
		res.Money += a.Money
	}
	return res, nil
}

// asker calls the provider.
type asker struct {
	url    string
	model  string
	prices throttle.PriceTable
}

// Ask asks the provider one question and reports its usage to Sluice by model, which prices it.
func (a asker) Ask(ctx context.Context, q Question) (Answer, error) {
	body, _ := json.Marshal(chatRequest{Model: a.model, PromptTokens: q.Prompt, CachedTokens: q.Cached, MaxTokens: q.MaxTokens, Question: q.N})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	var out struct{ Usage chatUsage }
	if resp.StatusCode != http.StatusOK {
		return Answer{}, fmt.Errorf("provider: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return Answer{}, err
	}
	u := throttle.Usage{Input: out.Usage.PromptTokens, CachedInput: out.Usage.PromptTokensDetails.CachedTokens, Output: out.Usage.CompletionTokens}
	if err := sluiceactivity.ReportModelUsage(ctx, "", u); err != nil {
		return Answer{}, err
	}
	money, err := a.prices.Cost(a.model, u)
	return Answer{Usage: u, Money: money}, err
}

// Phase is one round of questions: the sample's clock when it began, what each tenant's batch got,
// and how each tenant's allowance stood after it.
type Phase struct {
	Name       string
	Clock      time.Time
	Asked      map[string]Asked
	Allowances map[string]pgqueue.AllowanceStatus
}

// Result is the sample's two phases, before and after midnight.
type Result struct {
	Phases []Phase
	Calls  int // what the provider served
}

// limits are the provider's limit and each tenant's plan.
func (cfg Config) limits() ([]throttle.Limit, error) {
	ls := []throttle.Limit{{Key: "llm", MaxConcurrent: cfg.ProviderCap}}
	for _, p := range cfg.Plans {
		a, err := throttle.ParseAllowance(p.Allowance)
		if err != nil {
			return nil, err
		}
		a.OnSpent = p.OnSpent
		ls = append(ls, throttle.Limit{Key: "tenant:" + p.Tenant, Allowances: throttle.Allowances{a}})
	}
	return ls, nil
}

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
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	// A minute per call rather than the SDK's 10 s: a busy machine's dev server can be slower to start
	// the workflow than that, and the sample should wait, not fail.
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Logger: logger, RPCTimeout: time.Minute})
	if err != nil {
		return Result{}, fmt.Errorf("connect to Temporal at -temporal %q: %w", temporalAddr, err)
	}
	defer c.Close()
	limits, err := cfg.limits()
	if err != nil {
		return Result{}, err
	}
	plans := map[string]throttle.Limit{}
	for _, l := range limits[1:] {
		plans[l.Key] = l
	}
	provider := NewProvider()
	defer provider.Close()
	clock := &Clock{}
	clock.Set(cfg.Start)
	plugin, err := sluiceinterceptor.NewPlugin(sluiceinterceptor.Options{
		Pool: pool, Client: c, Schema: cfg.Schema, Limits: limits, Prices: &cfg.Prices, Clock: clock.Now,
		TransactionPooler: cfg.Pooler.TransactionPooler, ListenURL: cfg.Pooler.ListenURL,
		Routes: map[string]sluiceinterceptor.Route{"Ask": {
			Limits: []string{"llm"}, Model: cfg.Model,
			Tokens: func(args []any) (throttle.Cost, error) {
				q := args[0].(Question)
				return throttle.Cost{Input: q.Prompt, Output: q.MaxTokens}, nil
			},
			KeyLimits: func(_ sluiceinterceptor.ActivityInfo, args []any) []throttle.Limit {
				return []throttle.Limit{plans["tenant:"+args[0].(Question).Tenant]} // the plan, as Limits has it
			},
			FairnessKey: func(_ sluiceinterceptor.ActivityInfo, args []any) string { return args[0].(Question).Tenant },
		}},
		PollInterval: 100 * time.Millisecond,
		// The clock jumps 21 minutes between the phases: leases longer than that do not lapse at the
		// jump (a lapsed lease hands this worker's running calls back to Temporal, which runs them
		// again).
		LeaseTTL: time.Hour,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return Result{}, err
	}
	w := worker.New(c, cfg.TaskQueue, worker.Options{Plugins: []worker.Plugin{plugin}, WorkerStopTimeout: 10 * time.Second})
	w.RegisterWorkflow(AskAll)
	w.RegisterActivityWithOptions(asker{url: provider.URL(), model: cfg.Model, prices: cfg.Prices}.Ask, activity.RegisterOptions{Name: "Ask"})
	if err := w.Start(); err != nil {
		return Result{}, err
	}
	defer w.Stop()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: cfg.Schema, Now: clock.Now})
	if err != nil {
		return Result{}, err
	}

	var res Result
	midnight := time.Date(cfg.Start.Year(), cfg.Start.Month(), cfg.Start.Day()+1, 0, 1, 0, 0, cfg.Start.Location())
	for _, ph := range []struct {
		name  string
		at    time.Time
		count func(Plan) int
	}{{"before midnight", cfg.Start, func(p Plan) int { return p.Before }}, {"after midnight", midnight, func(p Plan) int { return p.After }}} {
		clock.Set(ph.at)
		phase, err := askPhase(ctx, c, q, cfg, ph.name, clock.Now(), ph.count)
		if err != nil {
			return res, err
		}
		res.Phases = append(res.Phases, phase)
	}
	res.Calls = provider.Calls()
	return res, nil
}

// askPhase has every tenant ask its questions at once, one workflow each, on the sample's clock at
// clock, and reads how each tenant's allowance stands afterwards.
func askPhase(ctx context.Context, c client.Client, q *pgqueue.Queue, cfg Config, name string, clock time.Time,
	count func(Plan) int) (Phase, error) {
	ph := Phase{Name: name, Clock: clock, Asked: map[string]Asked{}, Allowances: map[string]pgqueue.AllowanceStatus{}}
	runs := map[string]client.WorkflowRun{}
	for _, p := range cfg.Plans {
		qs := make([]Question, count(p))
		for i := range qs {
			qs[i] = Question{Tenant: p.Tenant, N: i, Prompt: p.Prompt, Cached: p.Cached, MaxTokens: p.MaxTokens}
		}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: cfg.TaskQueue,
			ID: fmt.Sprintf("plans-%s-%s-%s", p.Tenant, strings.ReplaceAll(name, " ", "-"), randomHex(3))}, AskAll, qs)
		if err != nil {
			return ph, err
		}
		runs[p.Tenant] = run
	}
	for _, p := range cfg.Plans {
		var a Asked
		if err := runs[p.Tenant].Get(ctx, &a); err != nil {
			return ph, fmt.Errorf("tenant %s: %w", p.Tenant, err)
		}
		ph.Asked[p.Tenant] = a
		st, err := q.LimitStatus(ctx, "tenant:"+p.Tenant)
		if err != nil {
			return ph, err
		}
		ph.Allowances[p.Tenant] = st.Allowances[0]
	}
	return ph, nil
}
