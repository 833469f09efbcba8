package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/pgbouncer"
	"github.com/sluicehq/sluice/internal/testkit/pgcluster"
)

const (
	// connMaxConnections is the connections figure's max_connections: the default of Postgres, and
	// of most managed services' smaller plans.
	connMaxConnections = 100
	// connBouncerPool is PgBouncer's default_pool_size in the pooled shapes: its server connections.
	connBouncerPool = 20
	// connPooledPoll is a polling replica's poll interval: the plugin's DefaultPooledPollInterval.
	connPooledPoll = 200 * time.Millisecond
	// connTimeout bounds one run: past it the run is reported incomplete, with what was left.
	connTimeout = 2 * time.Minute
	// connIdle is how long a replica's pool keeps an idle connection in the connDirectIdle shape:
	// less than a poll, so that a replica between polls makes room.
	connIdle = 500 * time.Millisecond
)

// The connections figure's shapes: how the replicas reach Postgres.
const (
	// connDirect: each replica a pool of 2 straight to Postgres, and a listener hijacked from it.
	connDirect = "direct"
	// connDirectIdle: as connDirect, but each pool closes connections idle for connIdle.
	connDirectIdle = "direct-idle"
	// connPooledPolling: each pool through PgBouncer, no listener; the loops poll every 200 ms.
	connPooledPolling = "pgbouncer-polling"
	// connPooledListen: each pool through PgBouncer, and a listener on a direct connection.
	connPooledListen = "pgbouncer-listen"
	// connRiverPooled: River beside them, as many clients as replicas, each a pool through PgBouncer,
	// PollOnly (River behind a transaction pooler) at its benchmark's settings (2,000 workers, fetch
	// poll 20 ms, cooldown 2 ms). River has one queue, not lines: it runs once, at the first line count.
	connRiverPooled = "river-pgbouncer"
	// connRiverPooledDefaults: the same with River's defaults (100 workers, fetch poll 1 s, cooldown
	// 100 ms), which may suit many clients better: the figure's River is the faster of the two.
	connRiverPooledDefaults = "river-pgbouncer-defaults"
)

// connShape is one run's configuration of the connections figure.
type connShape struct {
	Name     string `json:"shape"`
	Replicas int    `json:"replicas"`
	Lines    int    `json:"lines"`
}

// wiring is how a shape's replicas connect: the pool's URL, the listener, the poll interval.
func (s connShape) wiring(direct string, b *pgbouncer.Bouncer) (url string, listen store.Listen, poll time.Duration) {
	switch s.Name {
	case connPooledPolling:
		return b.URL, store.Listen{Off: true}, connPooledPoll
	case connPooledListen:
		return b.URL, store.Listen{URL: direct}, pollEvery
	default:
		return direct, store.Listen{}, pollEvery
	}
}

// bouncerInstalled reports whether PgBouncer's binary is on PATH or where Debian installs it.
func bouncerInstalled() bool {
	if _, err := exec.LookPath("pgbouncer"); err == nil {
		return true
	}
	_, err := os.Stat("/usr/sbin/pgbouncer")
	return err == nil
}

// measureConnections takes the connections figure on a private cluster of max_connections 100 it
// starts and stops: for each shape and line count, c.connReplicas replicas drain c.connTickets.
func measureConnections(ctx context.Context, _ *env, c config, res *results) error {
	cr := &connectionsResult{Tickets: c.connTickets, MaxConnections: connMaxConnections, BouncerPoolSize: connBouncerPool,
		PoolSize: c.fleetPool}
	res.Connections = cr
	if c.connReplicas == 0 || len(c.connShapes) == 0 {
		cr.Skipped = "no replicas or shapes asked for"
		return nil
	}
	fe, stop, err := startFleetEnv(ctx, c, connMaxConnections)
	if errors.Is(err, pgcluster.ErrUnavailable) {
		cr.Skipped = err.Error()
		log.Printf("bench: connections skipped: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer stop()
	if cr.Settings, err = fe.settings(ctx); err != nil {
		return err
	}
	log.Printf("bench: connections on a private cluster: %s", settingsLine(cr.Settings))
	for _, name := range c.connShapes {
		if name != connDirect && name != connDirectIdle && !bouncerInstalled() {
			if os.Getenv("CI") != "" {
				return fmt.Errorf("shape %s: no pgbouncer binary (Debian package pgbouncer), and CI is set", name)
			}
			cr.BouncerSkipped = "no pgbouncer binary (Debian package pgbouncer)"
			continue
		}
		for i, lines := range c.connLines {
			s := connShape{Name: name, Replicas: c.connReplicas, Lines: lines}
			run := connRunShape
			if name == connRiverPooled || name == connRiverPooledDefaults {
				if i > 0 {
					break
				}
				run = connRunRiver
			}
			r, err := run(ctx, fe, s, c.connTickets)
			if err != nil {
				return fmt.Errorf("%s, %d replicas, %d lines: %w", name, s.Replicas, lines, err)
			}
			cr.Runs = append(cr.Runs, r)
			log.Printf("bench: connections %s, %d replicas, %d line(s): %d of %d in %.1fs, admission p99 %.0f ms, max conns %d, failed %v, load %.1f",
				name, s.Replicas, lines, r.Completed, r.Written, r.Seconds, r.AdmitP99Ms, r.Connections, r.Failed, r.LoadAverage[0])
		}
	}
	return nil
}

// connRunShape drains n tickets written beforehand with s.Replicas replicas wired as s says. The
// replicas connect as their loops need connections, during the run; a claim, take, completion or
// listener refused a connection is counted and tried again. The run fails only on what must never
// happen: a completion that finds its ticket not admitted or running, or a completion failing after
// it reached Postgres. Everything else (tickets left, Verify's findings) is reported.
func connRunShape(ctx context.Context, fe *fleetEnv, s connShape, n int) (connRun, error) {
	e := fe.env
	out := connRun{connShape: s, Written: n}
	q, err := e.sluiceQueue(ctx)
	if err != nil {
		return out, err
	}
	defer e.dropSchema(ctx, q.Schema())
	fs := fleetShape{Replicas: s.Replicas, Lines: s.Lines}
	if err := fleetLimits(ctx, q, fs); err != nil {
		return out, err
	}
	if err := fleetFill(ctx, q, fs, n); err != nil {
		return out, err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE `+q.Schema()+`.sluice_ticket`); err != nil {
		return out, err
	}
	var b *pgbouncer.Bouncer
	if s.Name == connPooledPolling || s.Name == connPooledListen {
		if b, err = pgbouncer.Run(fe.url, pgbouncer.Options{PoolSize: connBouncerPool}); err != nil {
			return out, err
		}
		defer b.Stop()
	}
	tally, run, err := connDrain(ctx, fe, s, b, q.Schema(), n)
	if err != nil {
		return out, err
	}
	out.fill(run, tally)
	if out.Left, err = fleetUnfinished(ctx, e.pool, q.Schema()); err != nil {
		return out, err
	}
	if out.Verify, err = q.Verify(ctx); err != nil {
		return out, err
	}
	out.AdmitP50Ms, out.AdmitP99Ms = tally.admitLatency(run.start)
	return out, nil
}

// connRunRiver drains n River jobs inserted beforehand with s.Replicas River clients through a
// PgBouncer of the pooled shapes' size, PollOnly, at River's benchmark settings or (for
// connRiverPooledDefaults) its defaults, within connTimeout; a run that did not finish is reported
// with what it completed. River's figure has no admission latency, lines, Verify or retried
// statements: those columns are blank.
func connRunRiver(ctx context.Context, fe *fleetEnv, s connShape, n int) (connRun, error) {
	out := connRun{connShape: s, Written: n, River: true}
	b, err := pgbouncer.Run(fe.url, pgbouncer.Options{PoolSize: connBouncerPool})
	if err != nil {
		return out, err
	}
	defer b.Stop()
	m, err := riverFleetVia(ctx, fe, s.Replicas, n, riverWiring{url: b.URL, pollOnly: true,
		defaults: s.Name == connRiverPooledDefaults, timeout: connTimeout})
	if err != nil && !errors.Is(err, errRiverIncomplete) {
		return out, err
	}
	out.Completed, out.Seconds, out.Connections, out.LoadAverage = int(m.completed), m.Seconds, m.Connections, m.LoadAverage
	if m.Seconds > 0 {
		out.PerSecond = float64(out.Completed) / m.Seconds
	}
	return out, nil
}

// connMeasured is what connDrain measured, with the instant the replicas started.
type connMeasured struct {
	fleetRun
	start time.Time
}

// connDrain opens the replicas (no connection yet), starts the connection sampler (whose own
// connection is thus made before the fleet fills the server), then starts every replica's notifier
// and loops together and waits for the last completion or connTimeout. It closes the replicas.
func connDrain(ctx context.Context, fe *fleetEnv, s connShape, b *pgbouncer.Bouncer, schema string, n int) (*fleetTally, connMeasured, error) {
	url, listen, poll := s.wiring(fe.url, b)
	var idle time.Duration
	if s.Name == connDirectIdle {
		idle = connIdle
	}
	rctx, cancel := context.WithTimeout(ctx, connTimeout)
	defer cancel()
	fleetCtx, end := context.WithCancel(rctx)
	defer end()
	tally := &fleetTally{n: int64(n), end: end}
	rs := make([]*replica, 0, s.Replicas)
	defer func() {
		for _, r := range rs {
			r.close()
		}
	}()
	for i := range s.Replicas {
		r, err := openReplica(ctx, replicaConfig{url: url, schema: schema, owner: replicaOwner(i), poolSize: fe.poolSize,
			batch: fe.batch, tracer: fe.count, tally: tally, listen: listen, poll: poll, idle: idle, tolerant: true})
		if err != nil {
			return nil, connMeasured{}, err
		}
		rs = append(rs, r)
	}
	m, err := fe.begin(ctx, "", fe.count)
	if err != nil {
		return nil, connMeasured{}, err
	}
	g := new(errgroup.Group)
	for _, r := range rs {
		r.startNotifier(fleetCtx)
		g.Go(func() error {
			err := r.run(fleetCtx)
			if err != nil {
				end()
			}
			return err
		})
	}
	err = g.Wait()
	return tally, connMeasured{fleetRun: m.end(n), start: m.start}, err
}
