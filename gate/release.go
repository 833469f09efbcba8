package gate

import (
	"context"
	"sync"
	"time"
)

// endedKept is how long a gate remembers how a permit ended, for a Release that comes late (a retry
// of one that succeeded, or one after the hold lapsed).
const endedKept = time.Hour

// release is ReleaseActivity: it hands the request to the hold of its permit and waits for the hold
// to reconcile it. A permit this process does not hold (any more) releases nothing and says why.
func (g *Gate) release(ctx context.Context, req ReleaseRequest) (ReleaseResult, error) {
	if err := req.validate(); err != nil {
		return ReleaseResult{}, refuse(err)
	}
	if req.Permit.Holder != g.host.Owner {
		return ReleaseResult{Version: ContractVersion, Reason: ReasonUnknown}, nil
	}
	h, reason := g.holds.get(req.Permit.TicketID)
	if h == nil {
		return ReleaseResult{Version: ContractVersion, Reason: reason}, nil
	}
	done := make(chan releaseAnswer, 1)
	select {
	case h.releases <- releaseCall{req: req, done: done}:
	case <-h.ended:
		_, reason := g.holds.get(req.Permit.TicketID)
		return ReleaseResult{Version: ContractVersion, Reason: reason}, nil
	case <-ctx.Done():
		return ReleaseResult{}, ctx.Err()
	}
	a := <-done
	if a.err != nil {
		return ReleaseResult{}, refuse(a.err)
	}
	return a.res, nil
}

// holds are the permits this process holds, by ticket, and how recent ones ended.
type holds struct {
	mu    sync.Mutex
	held  map[int64]*hold
	ended map[int64]endedHold
	idle  chan struct{} // closed while nothing is held
}

type endedHold struct {
	reason string
	at     time.Time
}

func newHolds() *holds {
	idle := make(chan struct{})
	close(idle)
	return &holds{held: map[int64]*hold{}, ended: map[int64]endedHold{}, idle: idle}
}

func (hs *holds) add(id int64, h *hold) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.held) == 0 {
		hs.idle = make(chan struct{})
	}
	h.ended = make(chan struct{})
	hs.held[id] = h
}

// end records that the hold of ticket id ended, and why.
func (hs *holds) end(id int64, reason string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	now := time.Now()
	if h, ok := hs.held[id]; ok {
		close(h.ended)
		delete(hs.held, id)
	}
	hs.ended[id] = endedHold{reason: reason, at: now}
	for k, e := range hs.ended {
		if now.Sub(e.at) > endedKept {
			delete(hs.ended, k)
		}
	}
	if len(hs.held) == 0 {
		close(hs.idle)
	}
}

// get returns the hold of ticket id, or nil and why there is none.
func (hs *holds) get(id int64) (*hold, string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if h, ok := hs.held[id]; ok {
		return h, ""
	}
	if e, ok := hs.ended[id]; ok {
		return nil, e.reason
	}
	return nil, ReasonUnknown
}

// empty returns a channel closed once nothing is held.
func (hs *holds) empty() <-chan struct{} {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.idle
}
