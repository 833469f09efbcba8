package calibrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/store"
)

// Config is how much of a shape Run plays.
type Config struct {
	// Samples is how many explanations to take: rounds are played until there are as many, and the
	// last round is played to its end. Defaults to 300.
	Samples int
	// Short asks the shapes for their short form (see Shape.Round).
	Short bool
	// PollInterval is the spacing of the claims between events, as a dispatcher polls. Defaults to
	// 250 ms.
	PollInterval time.Duration
	// MaxRounds bounds the rounds played: past them Run fails. Defaults to 200.
	MaxRounds int
}

// owner is the one replica that enqueues, takes and completes every ticket.
const owner = "calibrate"

// claimMax is the batch of one claim, as the dispatcher's ClaimBatch.
const claimMax = 100

// clock is the virtual clock the queue reads. It moves by whole microseconds, Postgres' resolution.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t.Truncate(time.Microsecond); c.mu.Unlock() }

// run is one shape played on one schema.
type run struct {
	ctx     context.Context
	q       *store.Queue
	clock   *clock
	rng     *rand.Rand
	shape   Shape
	cfg     Config
	pending []Arrival           // this round's arrivals not yet enqueued, in time order
	arrived map[int64]Arrival   // each ticket's arrival, by ticket
	queued  map[int64]bool      // tickets waiting
	ends    map[int64]time.Time // running tickets and when they complete
	outcome map[int64]Outcome
	open    map[int64][]int // the samples of each waiting ticket whose admission is not yet seen
	res     Result
	claimAt time.Time // the next claim between events (a poll, or a claim's RetryAt)
	nextObs time.Time // the next sampling instant
}

// Run plays shape s on the migrated, empty schema of pool: it sets the shape's limits, then, round by
// round, enqueues the arrivals, claims at each event (an arrival, a completion) and at every
// PollInterval or the claim's RetryAt if sooner while tickets wait, takes the admitted tickets and
// completes each when its run ends, reporting the usage drawn. At each sampling instant it explains
// up to SamplePick waiting tickets, picked at random, and records each estimate against the
// ticket's admission.
func Run(ctx context.Context, pool *pgxpool.Pool, schema string, s Shape, cfg Config) (Result, error) {
	cfg.Samples = cmp.Or(cfg.Samples, 300)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 250*time.Millisecond)
	cfg.MaxRounds = cmp.Or(cfg.MaxRounds, 200)
	c := &clock{}
	c.set(s.Start)
	q, err := store.New(pool, store.Options{Schema: schema, Now: c.Now})
	if err != nil {
		return Result{}, err
	}
	if err := q.UpsertLimits(ctx, s.Limits...); err != nil {
		return Result{}, fmt.Errorf("shape %s: limits: %w", s.Name, err)
	}
	r := &run{ctx: ctx, q: q, clock: c, rng: rand.New(rand.NewPCG(s.Seed, s.Seed)), shape: s, cfg: cfg,
		arrived: map[int64]Arrival{}, queued: map[int64]bool{}, ends: map[int64]time.Time{}, outcome: map[int64]Outcome{},
		open: map[int64][]int{}, res: Result{Shape: s.Name, About: s.About}}
	if err := r.play(); err != nil {
		return r.res, fmt.Errorf("shape %s at %s: %w", s.Name, c.Now().Format(time.RFC3339Nano), err)
	}
	r.res.Virtual = c.Now().Sub(s.Start)
	return r.res, nil
}

// play runs the rounds to the end.
func (r *run) play() error {
	for {
		if len(r.pending) == 0 && len(r.queued) == 0 && len(r.ends) == 0 {
			if len(r.res.Samples) >= r.cfg.Samples {
				return nil
			}
			if r.res.Rounds == r.cfg.MaxRounds {
				return fmt.Errorf("%d rounds gave %d samples of %d", r.res.Rounds, len(r.res.Samples), r.cfg.Samples)
			}
			r.pending = r.shape.Round(r.rng, r.res.Rounds, r.clock.Now(), r.cfg.Short)
			for i := range r.pending {
				r.pending[i].At = r.pending[i].At.Truncate(time.Microsecond) // the clock's resolution
			}
			slices.SortStableFunc(r.pending, func(a, b Arrival) int { return a.At.Compare(b.At) })
			r.res.Rounds++
			if len(r.pending) == 0 {
				return errors.New("a round with no arrivals")
			}
		}
		r.clock.set(r.next())
		if err := r.step(); err != nil {
			return err
		}
	}
}

// next is the instant of the next event: an arrival, a completion, a claim between events or a
// sampling instant while tickets wait.
func (r *run) next() time.Time {
	var at time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if len(r.pending) > 0 {
		earlier(r.pending[0].At)
	}
	for _, end := range r.ends {
		earlier(end)
	}
	if len(r.queued) > 0 {
		earlier(r.claimAt)
		if len(r.res.Samples) < r.cfg.Samples {
			earlier(r.nextObs)
		}
	}
	return laterOf(at, r.clock.Now())
}

// step plays the current instant: arrivals, completions, claims, then the sampling.
func (r *run) step() error {
	now := r.clock.Now()
	var ps []store.EnqueueParams
	var as []Arrival
	for len(r.pending) > 0 && !r.pending[0].At.After(now) {
		a := r.pending[0]
		r.pending = r.pending[1:]
		as = append(as, a)
		ps = append(ps, store.EnqueueParams{LimitKeys: a.Keys, Cost: a.Cost, OutputCost: a.Output, Owner: owner,
			Namespace: "ns", WorkflowID: "wf", RunID: "run", ActivityID: fmt.Sprint(len(r.arrived)), ActivityType: "Call"})
	}
	if len(ps) > 0 {
		ts, err := r.q.EnqueueMany(r.ctx, ps)
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		for i, t := range ts {
			r.arrived[t.ID], r.queued[t.ID] = as[i], true
		}
	}
	if err := r.complete(now); err != nil {
		return err
	}
	if err := r.claim(now); err != nil {
		return err
	}
	if len(r.queued) > 0 && !now.Before(r.nextObs) {
		if err := r.sample(now); err != nil {
			return err
		}
	}
	if !now.Before(r.nextObs) {
		r.nextObs = now.Add(r.shape.SampleEvery)
	}
	return nil
}

// complete completes, in ID order, the runs that end by now, with the usage drawn for them.
func (r *run) complete(now time.Time) error {
	var done []int64
	for id, end := range r.ends {
		if !end.After(now) {
			done = append(done, id)
		}
	}
	slices.Sort(done)
	for _, id := range done {
		o := r.outcome[id]
		if err := r.q.Complete(r.ctx, store.CompleteParams{TicketID: id, ActualCost: o.ActualCost, ActualOutput: o.ActualOutput,
			OutcomeKind: store.OutcomeCompleted}); err != nil {
			return fmt.Errorf("complete ticket %d: %w", id, err)
		}
		delete(r.ends, id)
		delete(r.outcome, id)
		delete(r.arrived, id)
		r.res.Completed++
	}
	return nil
}

// claim claims until a claim leaves budget, as the dispatcher does, takes the admitted tickets and
// starts their runs; it sets the next claim between events.
func (r *run) claim(now time.Time) error {
	var retry time.Time
	for {
		res, err := r.q.Claim(r.ctx, store.ClaimParams{Max: claimMax})
		if err != nil {
			return err
		}
		if len(res.Expired) > 0 || len(res.Refused) > 0 {
			return fmt.Errorf("a claim expired %d and refused %d tickets: the shapes set no deadline and refuse none",
				len(res.Expired), len(res.Refused))
		}
		for _, a := range res.Admitted {
			if !r.queued[a.ID] {
				return fmt.Errorf("ticket %d admitted, not waiting", a.ID)
			}
			delete(r.queued, a.ID)
			for _, i := range r.open[a.ID] {
				r.res.Samples[i].Admitted = a.AdmittedAt
			}
			delete(r.open, a.ID)
		}
		retry = res.RetryAt
		if len(res.Admitted) < claimMax && !res.More {
			break
		}
	}
	taken, err := r.q.TakeAdmitted(r.ctx, owner, 10_000)
	if err != nil {
		return err
	}
	for _, t := range taken {
		o := r.shape.Run(r.rng, r.arrived[t.ID])
		o.RunTime = max(o.RunTime.Truncate(time.Microsecond), time.Millisecond)
		r.ends[t.ID], r.outcome[t.ID] = t.AdmittedAt.Add(o.RunTime), o
	}
	r.claimAt = now.Add(r.cfg.PollInterval)
	if retry.After(now) && retry.Before(r.claimAt) {
		r.claimAt = retry
	}
	return nil
}

// sample explains up to SamplePick waiting tickets, picked at random.
func (r *run) sample(now time.Time) error {
	ids := make([]int64, 0, len(r.queued))
	for id := range r.queued {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	r.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids[:min(len(ids), r.shape.SamplePick)] {
		te, err := r.q.Explain(r.ctx, id)
		if err != nil {
			return err
		}
		e := te.Explanation
		if e == nil {
			return fmt.Errorf("ticket %d waits, but Explain has it %s", id, te.Ticket.State)
		}
		s := Sample{Shape: r.shape.Name, Ticket: id, At: now, Estimate: e.Estimate, Low: e.EstimateLow, High: e.EstimateHigh,
			Unknown: e.Unknown, WaitsFor: e.WaitsFor}
		r.open[id] = append(r.open[id], len(r.res.Samples))
		r.res.Samples = append(r.res.Samples, s)
	}
	return nil
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
