package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// fleetTimeout bounds one fleet run: past it the run fails, naming how far it got.
const fleetTimeout = 5 * time.Minute

// fleetShape is one configuration of the fleet figure.
type fleetShape struct {
	Replicas int `json:"replicas"`
	// Lines is the number of limit keys the tickets are spread over, each its own line.
	Lines int `json:"lines"`
	// TenantCaps, when > 0, replaces Lines: one line "api" (not binding) and this many tenant limits
	// of MaxConcurrent 1, each ticket drawing on "api" and its tenant's.
	TenantCaps int `json:"tenant_caps,omitempty"`
}

// name is the shape as the table shows it.
func (s fleetShape) name() string {
	if s.TenantCaps > 0 {
		return fmt.Sprintf("1 (`api`) + %d tenant caps", s.TenantCaps)
	}
	return fmt.Sprint(s.Lines)
}

// fleetLimits creates the shape's limits: lines that do not bind, and the tenant caps.
func fleetLimits(ctx context.Context, q *store.Queue, s fleetShape) error {
	loose := func(key string) throttle.Limit {
		return throttle.Limit{Key: key, MaxConcurrent: 1_000_000, TokensPerMinute: 1e12}
	}
	var ls []throttle.Limit
	if s.TenantCaps > 0 {
		ls = append(ls, loose("api"))
		for i := range s.TenantCaps {
			ls = append(ls, throttle.Limit{Key: fmt.Sprint("tenant:", i), MaxConcurrent: 1})
		}
	} else {
		for i := range s.Lines {
			ls = append(ls, loose(fmt.Sprint("k", i)))
		}
	}
	for at := 0; at < len(ls); at += insertBatch {
		if err := q.UpsertLimits(ctx, ls[at:min(len(ls), at+insertBatch)]...); err != nil {
			return err
		}
	}
	return nil
}

// fleetFill writes n tickets by EnqueueMany, owned round robin by the replicas: over the lines with
// fair share between 100 tenants (as sluiceFill), or, with tenant caps, each on "api" and its tenant's
// cap, the tenant its fairness key.
func fleetFill(ctx context.Context, q *store.Queue, s fleetShape, n int) error {
	for at := 0; at < n; at += insertBatch {
		ps := make([]store.EnqueueParams, min(insertBatch, n-at))
		for j := range ps {
			i := at + j
			p := store.EnqueueParams{Cost: 100, Owner: replicaOwner(i % s.Replicas)}
			if s.TenantCaps > 0 {
				tenant := fmt.Sprint("tenant:", i%s.TenantCaps)
				p.LimitKeys, p.FairnessKey = []string{"api", tenant}, tenant
			} else {
				p.LimitKeys, p.FairnessKey = []string{fmt.Sprint("k", i%s.Lines)}, fmt.Sprint("tenant-", i%100)
			}
			ps[j] = p
		}
		if _, err := q.EnqueueMany(ctx, ps); err != nil {
			return err
		}
	}
	return nil
}

// replicaOwner is the owner ID of replica i.
func replicaOwner(i int) string { return fmt.Sprint("replica-", i) }

// sluiceFleet drains n tickets written beforehand with s.Replicas replicas, each a worker process
// of the dispatcher (see replica), started together once all are connected, and measures the run.
func sluiceFleet(ctx context.Context, fe *fleetEnv, s fleetShape, n int) (fleetRun, error) {
	e := fe.env
	if err := fe.checkpoint(ctx); err != nil {
		return fleetRun{}, err
	}
	q, err := e.sluiceQueue(ctx)
	if err != nil {
		return fleetRun{}, err
	}
	defer e.dropSchema(ctx, q.Schema())
	if err := fleetLimits(ctx, q, s); err != nil {
		return fleetRun{}, err
	}
	walEnqueue, err := fe.walOf(ctx, n, func() error { return fleetFill(ctx, q, s, n) })
	if err != nil {
		return fleetRun{}, err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE `+q.Schema()+`.sluice_ticket`); err != nil {
		return fleetRun{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	fleetCtx, end := context.WithCancel(rctx)
	defer end()
	tally := &fleetTally{n: int64(n), end: end}
	rs, err := startReplicas(ctx, fe, q.Schema(), s.Replicas, tally)
	defer func() {
		for _, r := range rs {
			r.close()
		}
	}()
	if err != nil {
		return fleetRun{}, err
	}
	m, err := fe.begin(ctx, "sluice-fleet", fe.count)
	if err != nil {
		return fleetRun{}, err
	}
	g := new(errgroup.Group)
	for _, r := range rs {
		g.Go(func() error {
			err := r.run(fleetCtx)
			if err != nil {
				end() // one replica's failure ends the run: the others would wait for its tickets
			}
			return err
		})
	}
	err = g.Wait()
	out := m.end(n)
	out.WALEnqueuePerTicket = walEnqueue
	switch {
	case err != nil:
		return out, err
	case tally.done.Load() < tally.n:
		return out, fmt.Errorf("sluice fleet: %d of %d tickets completed in %s (errors: %q)", tally.done.Load(), n, fleetTimeout, tally.errs)
	}
	left, err := fleetUnfinished(ctx, e.pool, q.Schema())
	if err != nil || len(left) > 0 {
		return out, fmt.Errorf("sluice fleet: tickets left unfinished %v (%v)", left, err)
	}
	out.AdmitP50Ms, out.AdmitP99Ms = tally.admitLatency(m.start)
	tally.fill(&out, n)
	return out, nil
}

// startReplicas connects count replicas, a few at a time; on error it returns those it made, for
// the caller to close.
func startReplicas(ctx context.Context, fe *fleetEnv, schema string, count int, tally *fleetTally) ([]*replica, error) {
	rs := make([]*replica, count)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range rs {
		g.Go(func() (err error) {
			rs[i], err = newReplica(gctx, replicaConfig{url: fe.url, schema: schema, owner: replicaOwner(i),
				poolSize: fe.poolSize, batch: fe.batch, tracer: fe.count, tally: tally})
			return err
		})
	}
	err := g.Wait()
	made := rs[:0]
	for _, r := range rs {
		if r != nil {
			made = append(made, r)
		}
	}
	return made, err
}

// fill writes the replicas' counts into out, per ticket.
func (t *fleetTally) fill(out *fleetRun, n int) {
	st, per := &t.stats, func(x int64) float64 { return float64(x) / float64(n) }
	out.ClaimsPerTicket, out.EmptyClaimsPerTicket = per(st.claims.Load()), per(st.emptyClaims.Load())
	out.TakesPerTicket, out.EmptyTakesPerTicket = per(st.takes.Load()), per(st.emptyTakes.Load())
	out.ReadsPerTicket = per(st.reads.Load())
	out.TakenShare = per(st.taken.Load())
	out.FailedClaims, out.FailedTakes = int(st.failedClaims.Load()), int(st.failedTakes.Load())
	out.Errors = t.errs
	out.TakeLagP50Ms, out.TakeLagP99Ms = percentiles(t.lags)
}

// fleetMeasure is a measurement under way: the instant, the CPU time, the WAL position and the
// connection sampler at its start.
type fleetMeasure struct {
	fe    *fleetEnv
	start time.Time
	cpu   float64
	lsn   string
	conns func() connections
	count *counter
}

// begin resets count and starts measuring a run whose pools set application_name app.
func (fe *fleetEnv) begin(ctx context.Context, app string, count *counter) (*fleetMeasure, error) {
	stop, err := fe.probe.sampleConnections(ctx, app)
	if err != nil {
		return nil, err
	}
	cpu, err := fe.probe.cpuSeconds()
	if err != nil {
		stop()
		return nil, err
	}
	lsn, err := fe.walLSN(ctx)
	if err == nil {
		err = fe.resetStatements(ctx)
	}
	if err != nil {
		stop()
		return nil, err
	}
	count.reset()
	return &fleetMeasure{fe: fe, start: time.Now(), cpu: cpu, lsn: lsn, conns: stop, count: count}, nil
}

// end ends the measurement of a run that handled n tickets.
func (m *fleetMeasure) end(n int) fleetRun {
	took := time.Since(m.start)
	cpu, _ := m.fe.probe.cpuSeconds()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The setup pool keeps its idle connections, so this gets one even when the fleet fills the server
	// (the connections figure); if not, the run has no WAL figure rather than none at all.
	wal, err := m.fe.walSince(ctx, m.lsn)
	if err != nil {
		log.Printf("bench: WAL position after the run not read: %v", err)
	}
	c := m.conns()
	top := m.fe.readStatements(ctx)
	return fleetRun{TopStatements: top, PerSecond: float64(n) / took.Seconds(), Seconds: took.Seconds(), WALPerTicket: wal / float64(n),
		StatementsPerTicket:   float64(m.count.statements.Load()) / float64(n),
		TransactionsPerTicket: float64(m.count.transactions.Load()) / float64(n),
		Connections:           c.All, BusyConnections: c.Busy,
		PgCPUPer1k: (cpu - m.cpu) * 1000 / float64(n), LoadAverage: loadAvg()}
}
