package main

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
)

// The demo's figure of the explanation's estimate (-explain-sample): while the sluice mode runs, a
// sampler explains queued tickets picked at random (pgqueue.Queue.Explain, what `sluice explain`
// prints) and watches each of them until it is admitted, so that every estimate can be set against
// the instant the claim really admitted the ticket. Not to be confused with estimate_error.go, the
// route's estimate of a call's tokens.

const (
	// explainEvery is how often the sampler picks tickets; explainPick how many, at most.
	explainEvery = 250 * time.Millisecond
	explainPick  = 20
	// admitPoll is how often the sampler reads the admission instants of the tickets it explained. A
	// ticket's row is deleted once its outcome is delivered, a call and a delivery after its
	// admission (the provider's latency alone is 50 ms or more): polled faster than that, no
	// admission is missed but by a stall of the sampler, which the figures count as not seen.
	admitPoll = 50 * time.Millisecond
)

// explainSample is one explanation of a queued ticket and, once seen, when the ticket was admitted.
// Instants are the database's clock, which both the explanation and the claim read.
type explainSample struct {
	Ticket   int64  `json:"ticket"`
	Activity string `json:"activity"`
	// At is the explanation's instant; Estimate its estimated admission, zero when not known, and
	// Unknown then why.
	At       time.Time `json:"at"`
	Estimate time.Time `json:"estimate,omitzero"`
	Unknown  string    `json:"unknown,omitempty"`
	// WaitsFor is what held the ticket (throttle.Explanation.WaitsFor; "" for nothing), Place its
	// place in its line (1: at its head).
	WaitsFor string `json:"waits_for"`
	Place    int    `json:"place"`
	// Admitted is the ticket's first admission after At; zero when the sampler did not see one (the
	// ticket expired, or was delivered between two reads).
	Admitted time.Time `json:"admitted,omitzero"`
	// ExplainMS is how long the Explain call took, in milliseconds.
	ExplainMS float64 `json:"explain_ms"`
}

// explainSampler samples the explanations of one schema's queued tickets (see explainSample).
type explainSampler struct {
	q      *pgqueue.Queue
	pool   *pgxpool.Pool
	table  string // the schema's sluice_ticket, quoted
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	samples    []explainSample
	watched    map[int64]bool        // tickets explained and still in the table
	admissions map[int64][]time.Time // each watched ticket's admissions seen, in order
	failures   int                   // reads that failed (logged once)
}

// startExplainSampler starts sampling q's queued tickets until stop.
func startExplainSampler(ctx context.Context, pool *pgxpool.Pool, q *pgqueue.Queue) *explainSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &explainSampler{
		q: q, pool: pool, table: pgx.Identifier{q.Schema(), "sluice_ticket"}.Sanitize(), cancel: cancel,
		watched: map[int64]bool{}, admissions: map[int64][]time.Time{},
	}
	s.wg.Go(func() { s.every(ctx, explainEvery, s.explainSome) })
	s.wg.Go(func() { s.every(ctx, admitPoll, s.readAdmissions) })
	return s
}

// every runs fn every d until ctx ends.
func (s *explainSampler) every(ctx context.Context, d time.Duration, fn func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.mu.Lock()
			if s.failures++; s.failures == 1 {
				stdlog.Printf("explain sampler: %v (further failures are counted, not logged)", err)
			}
			s.mu.Unlock()
		}
	}
}

// explainSome explains up to explainPick queued tickets picked at random, one after the other.
func (s *explainSampler) explainSome(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT id FROM `+s.table+` WHERE state = 'queued' ORDER BY random() LIMIT $1`, explainPick)
	if err != nil {
		return fmt.Errorf("pick queued tickets: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("pick queued tickets: %w", err)
	}
	for _, id := range ids {
		began := time.Now()
		te, err := s.q.Explain(ctx, id)
		if errors.Is(err, pgqueue.ErrNotFound) {
			continue // delivered since the pick
		} else if err != nil {
			return err
		}
		e := te.Explanation
		if e == nil {
			continue // admitted since the pick: no longer queued
		}
		s.mu.Lock()
		s.samples = append(s.samples, explainSample{
			Ticket: id, Activity: te.Ticket.ActivityType, At: e.Now, Estimate: e.Estimate, Unknown: e.Unknown,
			WaitsFor: e.WaitsFor, Place: e.Place, ExplainMS: float64(time.Since(began).Microseconds()) / 1000,
		})
		s.watched[id] = true
		s.mu.Unlock()
	}
	return nil
}

// readAdmissions reads the admission instant of every watched ticket, records those not seen yet, and
// forgets the tickets that are gone.
func (s *explainSampler) readAdmissions(ctx context.Context) error {
	s.mu.Lock()
	ids := make([]int64, 0, len(s.watched))
	for id := range s.watched {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	type row struct {
		ID       int64
		Admitted *time.Time
	}
	rows, err := s.pool.Query(ctx, `SELECT id, admitted_at FROM `+s.table+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("read admissions: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return fmt.Errorf("read admissions: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	present := make(map[int64]bool, len(got))
	for _, r := range got {
		present[r.ID] = true
		// A ticket put back in line (a 429) is admitted again later: each admission is kept.
		if seen := s.admissions[r.ID]; r.Admitted != nil && (len(seen) == 0 || !seen[len(seen)-1].Equal(*r.Admitted)) {
			s.admissions[r.ID] = append(seen, r.Admitted.UTC())
		}
	}
	for _, id := range ids {
		if !present[id] {
			delete(s.watched, id)
		}
	}
	return nil
}

// stop ends the sampling and returns the samples, each with its ticket's first admission after it,
// and how many reads failed.
func (s *explainSampler) stop(ctx context.Context) ([]explainSample, int) {
	s.cancel()
	s.wg.Wait()
	err := s.readAdmissions(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failures++
	}
	out := make([]explainSample, len(s.samples))
	for i, x := range s.samples {
		for _, at := range s.admissions[x.Ticket] {
			if at.After(x.At) {
				x.Admitted = at
				break
			}
		}
		out[i] = x
	}
	return out, s.failures
}
