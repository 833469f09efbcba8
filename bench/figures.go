package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// pair is one figure measured for Sluice and River side by side.
type pair struct {
	Name         string  `json:"name"`
	Sluice       []run   `json:"sluice_runs"`
	River        []run   `json:"river_runs"`
	SluiceMedian float64 `json:"sluice_median_per_second"`
	RiverMedian  float64 `json:"river_median_per_second"`
	Ratio        float64 `json:"ratio"` // SluiceMedian / RiverMedian
	Target       float64 `json:"target_ratio"`
}

func (p *pair) summarize() {
	p.SluiceMedian = median(p.Sluice, func(r run) float64 { return r.PerSecond })
	p.RiverMedian = median(p.River, func(r run) float64 { return r.PerSecond })
	if p.RiverMedian > 0 {
		p.Ratio = p.SluiceMedian / p.RiverMedian
	}
}

func median[T any](xs []T, f func(T) float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// inTurn runs a then b in even rounds, b then a in odd ones.
func inTurn(round int, a, b func() error) error {
	if round%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}

// measureEnqueue takes the write of c.tickets tickets by EnqueueMany beside River's InsertMany, both
// in batches of insertBatch from one caller.
func measureEnqueue(ctx context.Context, e *env, c config, res *results) error {
	p := pair{Name: fmt.Sprintf("enqueue, batches of %d (EnqueueMany vs InsertMany)", insertBatch), Target: 0.5}
	for round := range c.rounds {
		sluice := func() error {
			q, err := e.sluiceQueue(ctx)
			if err != nil {
				return err
			}
			defer e.dropSchema(ctx, q.Schema())
			if err := sluiceLimits(ctx, q, 1); err != nil {
				return err
			}
			e.count.reset()
			took, err := sluiceFill(ctx, q, c.tickets, 1)
			p.Sluice = append(p.Sluice, measured(c.tickets, took, e.count))
			return err
		}
		river := func() error {
			schema, err := e.riverSchema(ctx)
			if err != nil {
				return err
			}
			defer e.dropSchema(ctx, schema)
			cl, err := riverClient(e.riverPool, schema, 0, false)
			if err != nil {
				return err
			}
			e.riverCount.reset()
			took, err := riverFill(ctx, cl, c.tickets)
			p.River = append(p.River, measured(c.tickets, took, e.riverCount))
			return err
		}
		if err := inTurn(round, sluice, river); err != nil {
			return err
		}
	}
	p.summarize()
	res.Enqueue = append(res.Enqueue, p)
	return nil
}

// latency is the claim latency at one queue length.
type latency struct {
	Queued      int        `json:"queued"`
	MedianMs    float64    `json:"median_ms"`
	P90Ms       float64    `json:"p90_ms"`
	Claims      int        `json:"claims"`
	LoadAverage [3]float64 `json:"load_average"`
}

// measureClaimLatency times claims of a batch of 10 from one line with 1k, 100k and 1M queued (fair
// share over 100 tenants), filled by EnqueueMany. Between claims (untimed) the batch is put back.
func measureClaimLatency(ctx context.Context, e *env, c config, res *results) error {
	const claims = 200
	for _, n := range c.queued {
		q, err := e.sluiceQueue(ctx)
		if err != nil {
			return err
		}
		if err := sluiceLimits(ctx, q, 1); err != nil {
			return err
		}
		if _, err := sluiceFill(ctx, q, n, 1); err != nil {
			return err
		}
		if _, err := q.Pool().Exec(ctx, `VACUUM ANALYZE `+q.Schema()+`.sluice_ticket`); err != nil {
			return err
		}
		var took []float64
		for range claims {
			start := time.Now()
			r, err := q.Claim(ctx, store.ClaimParams{Max: 10})
			d := time.Since(start)
			if err != nil {
				return err
			}
			if len(r.Admitted) != 10 {
				return fmt.Errorf("claim from %d queued admitted %d, want 10", n, len(r.Admitted))
			}
			took = append(took, float64(d)/float64(time.Millisecond))
			if _, err := q.Pool().Exec(ctx, `WITH r AS (UPDATE `+q.Schema()+`.sluice_ticket SET state = 'queued', admitted_at = NULL
				WHERE state = 'admitted' RETURNING 1)
				UPDATE `+q.Schema()+`.sluice_limit SET inflight_count = 0, inflight_tokens = 0`); err != nil {
				return err
			}
		}
		e.dropSchema(ctx, q.Schema())
		slices.Sort(took)
		l := latency{Queued: n, MedianMs: median(took, func(x float64) float64 { return x }),
			P90Ms: took[len(took)*9/10], Claims: claims, LoadAverage: loadAvg()}
		log.Printf("bench: claim latency at %d queued: median %.2f ms", n, l.MedianMs)
		res.ClaimLatency = append(res.ClaimLatency, l)
	}
	return nil
}
