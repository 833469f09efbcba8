package dispatcher

import (
	"cmp"
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/testsignal"
)

// msgReconciled is the warning the self-check logs for each ticket it reconciles.
const msgReconciled = "sluice: self-check reconciled a ticket Postgres and this process disagreed on"

// selfCheckConfirm is how soon after a check that found a mismatch the next one runs, to confirm it.
const selfCheckConfirm = time.Second

// reconcileAction is what the self-check does about a ticket whose state in Postgres this process
// does not match.
type reconcileAction string

const (
	actionNone     reconcileAction = ""
	actionRun      reconcileAction = "run"       // running in Postgres, held here, never begun: a claim or take whose answer was lost
	actionTake     reconcileAction = "take"      // admitted and held here, yet not taken: take it by ID and run it
	actionHandBack reconcileAction = "hand_back" // not held here: hand it back to Temporal, releasing what it holds
)

// SelfChecker holds what Postgres says this owner holds against its registry and reconciles the
// difference (see selfCheck): every SelfCheckInterval, at once when a service asks (checkSoon: a
// statement's outcome was unknown), and a second later again while the last check saw mismatches,
// to act on them sooner. Tickets to run it hands to the Runner.
type SelfChecker struct {
	loops
	*deps
	runner  ticketRunner
	strikes map[int64]reconcileAction // mismatches seen by the last check, by ticket; the loop's own
	signals selfCheckSignals
}

// selfCheckSignals are the SelfChecker's events, for tests.
type selfCheckSignals struct {
	Checked testsignal.Signal[int] // a check ended; how many tickets it reconciled
}

// Start starts the self-check loop.
func (s *SelfChecker) Start(ctx context.Context) error { return s.start(ctx, s.loop) }

// Stop ends the self-check loop.
func (s *SelfChecker) Stop(ctx context.Context) error { return s.stop(ctx) }

func (s *SelfChecker) loop(ctx context.Context) {
	s.strikes = map[int64]reconcileAction{}
	interval := cmp.Or(s.cfg.SelfCheckInterval, 5*time.Second) // never a busy loop
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.checkNow:
		case <-t.C:
		}
		next := interval
		if s.selfCheck(ctx) {
			next = min(next, selfCheckConfirm)
		}
		t.Reset(next)
	}
}

// selfCheck holds what Postgres says this owner holds (its queued, admitted and running tickets)
// against the registry, and reconciles each ticket they disagree on twice in a row: once could be a
// hand-over under way (a claim's tickets between its commit and the runner). It catches whatever left
// them apart: a commit whose answer was lost (a claim's, a take's, an enqueue's), a failed requeue or
// completion, and what no test foresaw. It reports whether mismatches are waiting for confirmation.
func (s *SelfChecker) selfCheck(ctx context.Context) bool {
	reconciled := 0
	defer func() { s.signals.Checked.Signal(reconciled) }()
	if s.stopping.Load() {
		return false // the stop hands back what this process holds
	}
	ts, err := s.q.OwnerTickets(ctx, s.cfg.Owner)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sluice: self-check", "error", err)
		}
		return len(s.strikes) > 0
	}
	seen := map[int64]reconcileAction{}
	var take, back []int64
	for _, t := range ts {
		a := s.mismatch(t)
		switch {
		case a == actionNone:
			continue
		case s.strikes[t.ID] != a:
			seen[t.ID] = a // first seen: confirm at the next check
			continue
		}
		reconciled++
		s.log.Warn(msgReconciled, "ticket_id", t.ID, "state", t.State, "action", string(a), "owner", s.cfg.Owner)
		s.tm.ForKey(t.LineKey).WithTags(map[string]string{"sluice_action": string(a)}).Counter(telemetry.MetricSelfCheckReconciled).Inc(1)
		switch a {
		case actionRun:
			s.runner.run(t)
		case actionTake:
			take = append(take, t.ID)
		case actionHandBack:
			back = append(back, t.ID)
		}
	}
	s.strikes = seen
	s.handBack(ctx, back)
	taken, err := s.q.TakeTickets(ctx, s.cfg.Owner, take)
	if err != nil {
		s.log.Warn("sluice: self-check: take tickets", "tickets", take, "error", err)
	}
	for _, t := range taken {
		s.runner.run(t)
	}
	return len(seen) > 0
}

// mismatch is what the self-check would do about t, as Postgres has it, given the registry.
func (s *SelfChecker) mismatch(t store.Ticket) reconcileAction {
	inv := s.reg.lookup(ticketKey(t))
	switch {
	case inv == nil:
		return actionHandBack
	case t.State == store.TicketStateAdmitted:
		return actionTake
	case t.State == store.TicketStateRunning && !inv.ranAdmission(t):
		return actionRun
	}
	return actionNone
}

// handBack hands back to Temporal the tickets of ids, unfinished tickets this process does not hold
// (queued, admitted or running), as a stopping process does its own: their limits are released (an
// admitted ticket's tokens come back; a running one's may have reached the provider), the deliverers
// report a retryable failure, and the retry keeps the ticket's place in line. Temporal answers
// NotFound for an attempt it has failed already (an enqueue whose caller heard it failed).
func (s *SelfChecker) handBack(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	back, err := s.q.HandBack(ctx, store.HandBackParams{Owner: s.cfg.Owner, TicketIDs: ids, Max: len(ids)})
	if err != nil {
		s.log.Warn("sluice: self-check: hand back tickets", "tickets", ids, "error", err)
	}
	for _, t := range back {
		s.tm.ForKey(t.LineKey).Counter(telemetry.MetricTicketsHandedBack).Inc(1)
	}
}
