package dispatcher

import (
	"context"
	"sync"

	"github.com/sluicehq/sluice/internal/store"
)

// Registry is the invocations this process holds, queued or running, bounded by a number of slots.
// It is safe for concurrent use.
type Registry struct {
	slots chan struct{}
	mu    sync.Mutex
	held  map[string]*Invocation
}

// NewRegistry returns a registry of maxHeld slots.
func NewRegistry(maxHeld int) *Registry {
	return &Registry{slots: make(chan struct{}, maxHeld), held: map[string]*Invocation{}}
}

// acquire takes a slot, waiting while all are taken, until ctx is done.
func (r *Registry) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold registers inv, which has a slot.
func (r *Registry) hold(inv *Invocation) {
	r.mu.Lock()
	r.held[inv.key] = inv
	r.mu.Unlock()
}

// drop forgets an invocation and frees its slot; it is safe to call twice.
func (r *Registry) drop(inv *Invocation) {
	r.mu.Lock()
	ok := r.held[inv.key] == inv
	if ok {
		delete(r.held, inv.key)
	}
	r.mu.Unlock()
	if ok {
		<-r.slots
	}
}

// letGo drops inv unless a run of it is under way, deciding atomically with the run's begin (see
// Invocation.abandon): a run the runner has not begun yet never begins. When one is under way it
// returns the run's cancel function and true, and inv stays held: the run drops it when it ends.
func (r *Registry) letGo(inv *Invocation) (cancel context.CancelCauseFunc, running bool) {
	if cancel, running = inv.abandon(); !running {
		r.drop(inv)
	}
	return cancel, running
}

// dropTicket forgets the invocation of ticket t, which Postgres has finished or removed, if this
// process holds it: a run of it not begun yet never begins (Invocation.abandon), and one under way
// (a stop hands back running tickets) is cancelled with cause and let go, its result dropped.
func (r *Registry) dropTicket(t store.Ticket, cause error) {
	if inv := r.lookup(ticketKey(t)); inv != nil {
		if cancel, running := inv.abandon(); running {
			cancel(cause)
		}
		r.drop(inv)
	}
}

func (r *Registry) lookup(key string) *Invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[key]
}

func (r *Registry) snapshot() []*Invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Invocation, 0, len(r.held))
	for _, inv := range r.held {
		out = append(out, inv)
	}
	return out
}
