package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/store"
)

// replicaStats counts what a replica's loops did; every field is safe for concurrent use.
type replicaStats struct {
	claims, emptyClaims, failedClaims atomic.Int64
	takes, emptyTakes, failedTakes    atomic.Int64
	reads                             atomic.Int64 // reads of tickets named in notifications (no write)
	failedCompletes, failedListens    atomic.Int64 // completions retried, listener connections that failed
	tooMany                           atomic.Int64 // of the failures, those refused with SQLSTATE 53300
	taken                             atomic.Int64 // tickets that came through a take or a read, not the claimer's own
}

// fleetTally is what every replica of one run shares: the tickets completed, the run's end, the
// counts, the first errors, and the lag of each take (admitted_at → taken).
type fleetTally struct {
	n     int64
	done  atomic.Int64
	end   context.CancelFunc // called when the last ticket's completion commits
	stats replicaStats

	mu   sync.Mutex
	errs []string
	seen []string  // the kind and cause of each of errs
	lags []float64 // milliseconds
	// admits are the admission instants of the completed tickets: a completion whose outcome was
	// delivered deletes its ticket, so they are kept here rather than read from the rows after.
	admits []time.Time
}

// fail records the text of an error a loop survived (a failed claim, take, completion or listener
// connection), up to 10 different ones, and counts it as too many clients when it is.
func (t *fleetTally) fail(what string, err error) {
	if tooManyClients(err) {
		t.stats.tooMany.Add(1)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// One text per kind and cause: 53300s differ only in the owner they name.
	key := what + ": " + err.Error()
	if tooManyClients(err) {
		key = what + ": 53300"
	}
	if len(t.errs) < 10 && !slices.Contains(t.seen, key) {
		t.seen = append(t.seen, key)
		t.errs = append(t.errs, what+": "+err.Error())
	}
}

// lagged records how long each taken ticket waited between its admission and its take.
func (t *fleetTally) lagged(ts []store.Ticket, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range ts {
		t.lags = append(t.lags, float64(now.Sub(x.AdmittedAt))/float64(time.Millisecond))
	}
}

// admitted records the admission instants of completed tickets.
func (t *fleetTally) admitted(ts []store.Ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range ts {
		t.admits = append(t.admits, x.AdmittedAt)
	}
}

// admitLatency returns the 50th and 99th percentiles, in milliseconds, of how long after start the
// completed tickets were admitted: the tickets are written before the fleet starts, so this is where
// in the drain each ticket was admitted.
func (t *fleetTally) admitLatency(start time.Time) (p50, p99 float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ms := make([]float64, len(t.admits))
	for i, at := range t.admits {
		ms[i] = max(0, float64(at.Sub(start))/float64(time.Millisecond))
	}
	return percentiles(ms)
}
