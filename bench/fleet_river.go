package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"
)

// riverWiring is how River's clients reach Postgres and work: through url (the private cluster's
// when empty); when pollOnly, without LISTEN, as River runs behind a transaction pooler (its
// PollOnly); with River's own defaults (100 workers, fetch cooldown 100 ms, fetch poll 1 s) when
// defaults, else its benchmark's settings (riverClient); bounded by timeout (fleetTimeout when 0).
type riverWiring struct {
	url      string
	pollOnly bool
	defaults bool
	timeout  time.Duration
}

// errRiverIncomplete marks a River run that did not complete its jobs in time: fleetRun.completed
// says how many it did.
var errRiverIncomplete = errors.New("river fleet: incomplete")

// riverFleet drains n noop jobs inserted beforehand with clients River clients, each on a pool of its
// own of the replicas' size (River's listener holds one of its connections), started together once
// all are connected, until every job's completion is recorded (River sends the completed event once
// its completer has written the batch).
func riverFleet(ctx context.Context, fe *fleetEnv, clients, n int) (fleetRun, error) {
	return riverFleetVia(ctx, fe, clients, n, riverWiring{})
}

// riverFleetVia is riverFleet with the clients wired as w says; the jobs are inserted directly.
func riverFleetVia(ctx context.Context, fe *fleetEnv, clients, n int, w riverWiring) (fleetRun, error) {
	e := fe.env
	if err := fe.checkpoint(ctx); err != nil {
		return fleetRun{}, err
	}
	schema, err := e.riverSchema(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	defer e.dropSchema(ctx, schema)
	inserter, err := riverClient(e.riverPool, schema, 0, false)
	if err != nil {
		return fleetRun{}, err
	}
	walEnqueue, err := fe.walOf(ctx, n, func() error { _, err := riverFill(ctx, inserter, n); return err })
	if err != nil {
		return fleetRun{}, err
	}
	if _, err := e.riverPool.Exec(ctx, `ANALYZE `+schema+`.river_job`); err != nil {
		return fleetRun{}, err
	}
	pools, err := riverPools(ctx, fe, clients, cmp.Or(w.url, fe.url))
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	if err != nil {
		return fleetRun{}, err
	}
	var done atomic.Int64
	all := make(chan struct{})
	cs := make([]*river.Client[pgxTx], len(pools))
	for i, pool := range pools {
		if cs[i], err = riverClientWith(pool, schema, riverWorkers, w.pollOnly, w.defaults); err != nil {
			return fleetRun{}, err
		}
		// A buffer for every job: River drops the events a full buffer cannot take.
		events, cancel := cs[i].SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 1})
		defer cancel()
		go func() {
			for range events {
				if done.Add(1) == int64(n) {
					close(all)
				}
			}
		}()
	}
	app := "river-fleet"
	if w.url != "" {
		app = "" // through a pooler the server connections are the pooler's: count every one, as for Sluice
	}
	m, err := fe.begin(ctx, app, fe.riverCount)
	if err != nil {
		return fleetRun{}, err
	}
	for _, c := range cs {
		if err := c.Start(ctx); err != nil {
			m.end(n)
			stopRiver(cs)
			return fleetRun{}, err
		}
	}
	timeout := cmp.Or(w.timeout, fleetTimeout)
	select {
	case <-all:
	case <-time.After(timeout):
	}
	out := m.end(n)
	out.WALEnqueuePerTicket = walEnqueue
	stopRiver(cs)
	if out.completed = min(done.Load(), int64(n)); out.completed < int64(n) {
		return out, fmt.Errorf("%w: %d of %d jobs completed in %s", errRiverIncomplete, out.completed, n, timeout)
	}
	return out, nil
}

// riverPools opens clients pools of the fleet's size to url, every connection open, a few at a time;
// on error it returns those it made, for the caller to close.
func riverPools(ctx context.Context, fe *fleetEnv, clients int, url string) ([]*pgxpool.Pool, error) {
	pools := make([]*pgxpool.Pool, clients)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range pools {
		g.Go(func() error {
			p, err := fleetPool(gctx, url, fe.poolSize, 0, "river-fleet", fe.riverCount)
			if err != nil {
				return err
			}
			pools[i] = p
			return warm(gctx, p)
		})
	}
	err := g.Wait()
	made := pools[:0]
	for _, p := range pools {
		if p != nil {
			made = append(made, p)
		}
	}
	return made, err
}

// stopRiver stops the clients together, each given a minute.
func stopRiver(cs []*river.Client[pgxTx]) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.Stop(ctx)
		})
	}
	wg.Wait()
}
