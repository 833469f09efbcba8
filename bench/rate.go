package main

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// rateResult is one rate accuracy run.
type rateResult struct {
	Dimension   string     `json:"dimension"` // "requests" or "tokens"
	Burner      bool       `json:"cpu_burner"`
	Claimers    int        `json:"claimers"`
	Rate        float64    `json:"rate_per_second"` // requests, or tokens, per second
	Burst       float64    `json:"burst"`
	Seconds     float64    `json:"seconds"`
	Admitted    float64    `json:"admitted"` // requests, or tokens, admitted in the window
	Allowed     float64    `json:"allowed"`  // burst + rate x seconds: the most the bucket allows
	Share       float64    `json:"share"`    // Admitted / Allowed
	LargestSec  float64    `json:"largest_1s"`
	Excess      float64    `json:"largest_excess"` // max over windows of admitted - rate x length: at most Burst
	Conforms    bool       `json:"conforms"`       // Excess <= Burst
	LoadAverage [3]float64 `json:"load_average"`
}

// measureRate runs 4 claimers sharing one limit, as 4 workers' claimers do (claim, complete what was
// admitted, sleep until the line's RetryAt), for c.rateFor, with and without a CPU burner of twice
// the cores, on a request rate and on a token rate; it reads the admission instants from the tickets.
func measureRate(ctx context.Context, e *env, c config, res *results) error {
	const claimers = 4
	for _, burner := range []bool{false, true} {
		for _, dim := range []string{"requests", "tokens"} {
			stop := func() {}
			if burner {
				stop = burn()
			}
			r, err := rateRun(ctx, e, dim, claimers, c.rateFor)
			stop()
			if err != nil {
				return err
			}
			r.Burner = burner
			log.Printf("bench: rate %s burner=%v: %.1f%% of the allowed, excess %.2f (burst %.0f)", dim, burner, 100*r.Share, r.Excess, r.Burst)
			res.Rate = append(res.Rate, r)
		}
	}
	return nil
}

// burn starts busy loops on twice the cores and returns what stops them.
func burn() (stop func()) {
	var cmds []*exec.Cmd
	for range 2 * runtime.NumCPU() {
		cmd := exec.Command("bash", "-c", "while :; do :; done")
		if err := cmd.Start(); err == nil {
			cmds = append(cmds, cmd)
		}
	}
	return func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
}

func rateRun(ctx context.Context, e *env, dim string, claimers int, dur time.Duration) (rateResult, error) {
	const perSecond, burst, cost = 20.0, 5.0, 1000
	limit := throttle.Limit{Key: "k", MaxConcurrent: 1_000_000}
	r := rateResult{Dimension: dim, Claimers: claimers, Seconds: dur.Seconds()}
	ticketCost := int64(0)
	if dim == "requests" {
		limit.RequestsPerSecond, limit.Burst = perSecond, burst
		r.Rate, r.Burst = perSecond, burst
	} else {
		limit.TokensPerMinute, limit.TokenBurst = perSecond*cost*60, burst*cost
		r.Rate, r.Burst, ticketCost = perSecond*cost, burst*cost, cost
	}
	q, err := e.sluiceQueue(ctx)
	if err != nil {
		return r, err
	}
	defer e.dropSchema(ctx, q.Schema())
	if err := q.UpsertLimits(ctx, limit); err != nil {
		return r, err
	}
	n := int(perSecond*dur.Seconds()*1.5) + 100
	for at := 0; at < n; at += insertBatch {
		ps := make([]store.EnqueueParams, min(insertBatch, n-at))
		for i := range ps {
			ps[i] = store.EnqueueParams{LimitKeys: []string{"k"}, Cost: ticketCost, Owner: "bench"}
		}
		if _, err := q.EnqueueMany(ctx, ps); err != nil {
			return r, err
		}
	}
	notifier := q.NewNotifier(nil)
	rctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = notifier.Run(rctx) })
	<-notifier.Listening()
	var start time.Time
	if err := q.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&start); err != nil {
		return r, err
	}
	errs := make(chan error, claimers)
	for i := range claimers {
		wg.Go(func() { errs <- claimLoop(rctx, q, notifier, fmt.Sprint("claimer-", i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && rctx.Err() == nil {
			return r, err
		}
	}
	if err := r.analyze(ctx, q, start, dur); err != nil {
		return r, err
	}
	return r, nil
}

// analyze reads the admissions of the dur from start and fills in the figures: what was admitted
// against what the bucket allows, the largest second, and the largest excess over the rate of any
// window (a bucket of that burst allows at most the burst).
func (r *rateResult) analyze(ctx context.Context, q *store.Queue, start time.Time, dur time.Duration) error {
	type admission struct {
		at   time.Time
		cost float64
	}
	rows, err := q.Pool().Query(ctx, `SELECT admitted_at, greatest(cost, 1) FROM `+q.Schema()+`.sluice_ticket
		WHERE admitted_at IS NOT NULL AND admitted_at < $1 ORDER BY admitted_at`, start.Add(dur))
	if err != nil {
		return err
	}
	var as []admission
	for rows.Next() {
		var a admission
		if err := rows.Scan(&a.at, &a.cost); err != nil {
			return err
		}
		if r.Dimension == "requests" {
			a.cost = 1
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range as {
		r.Admitted += as[i].cost
		sum, sec := 0.0, 0.0
		for j := i; j < len(as); j++ {
			sum += as[j].cost
			dt := as[j].at.Sub(as[i].at).Seconds()
			r.Excess = max(r.Excess, sum-r.Rate*dt)
			if dt < 1 {
				sec = sum
			}
		}
		r.LargestSec = max(r.LargestSec, sec)
	}
	r.Allowed = r.Burst + r.Rate*dur.Seconds()
	r.Share = r.Admitted / r.Allowed
	r.Conforms = r.Excess <= r.Burst+1e-6
	r.LoadAverage = loadAvg()
	return nil
}

// claimLoop is the dispatcher Claimer's loop, with each admitted ticket completed at once.
func claimLoop(ctx context.Context, q *store.Queue, n *store.Notifier, owner string) error {
	waiter := n.ClaimWaiter()
	defer waiter.Close()
	for {
		res, err := q.Claim(ctx, store.ClaimParams{Max: store.DefaultClaimMax, Owner: owner})
		if err != nil {
			return err
		}
		if len(res.Admitted) > 0 {
			ps := make([]store.CompleteParams, len(res.Admitted))
			for i, t := range res.Admitted {
				ps[i] = store.CompleteParams{TicketID: t.ID, ActualCost: -1, OutcomeKind: store.OutcomeCompleted}
			}
			if _, err := q.CompleteMany(ctx, ps); err != nil {
				return err
			}
		}
		next := pollEvery
		if !res.RetryAt.IsZero() {
			next = min(next, max(0, res.RetryAt.Sub(res.Now)))
		}
		if len(res.Admitted) == store.DefaultClaimMax || res.More {
			next = 0
		}
		if next > 0 && !waiter.Wait(ctx, res.WaitsOnRelease, next) {
			return nil
		}
	}
}
