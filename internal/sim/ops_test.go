package sim_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

// live draws a live replica (there is always one: the last is never killed).
func (r *run) live() *replica {
	var alive []*replica
	for _, rep := range r.reps {
		if rep.alive {
			alive = append(alive, rep)
		}
	}
	return alive[rapid.IntRange(0, len(alive)-1).Draw(r.t, "replica")]
}

var costs = []int64{0, 1, 10, 100, 400, 1000, 2500, 10000}

func (r *run) enqueue() {
	rep := r.live()
	ps, ts := r.drawTickets(rep)
	r.enqueueBatch(rep.q, ps, ts)
}

// enqueueBatch has q enqueue ps, the tickets ts of the model: all of them, or none when one names a
// limit the model does not have (deleted), which must fail with ErrUnknownLimit.
func (r *run) enqueueBatch(q *store.Queue, ps []store.EnqueueParams, ts []*sim.Ticket) {
	written, err := q.EnqueueMany(r.ctx, ps)
	if !r.knows(ts) {
		if !errors.Is(err, store.ErrUnknownLimit) {
			r.fail("enqueue naming a deleted limit: got %v (%d written), want ErrUnknownLimit", err, len(written))
		}
		return
	}
	if err != nil {
		r.fail("enqueue: %v", err)
	}
	for i, w := range written {
		r.add(ts[i], w)
	}
}

// enqueueClaim has a live replica write tickets and claim their lines in the same transaction, as
// the dispatcher's enqueuer does (EnqueueClaiming): each ticket naming a limit the model does not have
// is refused alone, the others are written, and what the claim decided is held to the model as any
// claim's is. With budget left, nothing admissible may stay queued in the lines it claimed: those that
// were empty (a line with queued tickets is left to the claimers).
func (r *run) enqueueClaim(rep *replica) {
	ps, ts := r.drawTickets(rep)
	max := rapid.IntRange(1, 6).Draw(r.t, "max")
	empty := linesOf(ps)
	for _, t := range r.m.Tickets {
		if t.State == sim.Queued {
			delete(empty, t.Keys[0])
		}
	}
	written, errs, res, err := r.enqueueClaiming(rep, rep.q, ps, max)
	if err != nil {
		r.fail("enqueue claiming by %s failed (no fault was injected): %v", rep.id, err)
	}
	r.addWritten(ps, ts, written, errs)
	for _, a := range res.Admitted {
		if !empty[a.LineKey] {
			r.fail("enqueue claiming admitted ticket %d in line %q, which had tickets queued before it", a.ID, a.LineKey)
		}
	}
	r.claimed(rep, res)
	if len(res.Admitted) < max {
		r.checkNothingAdmissible(r.now(), empty)
	}
}

// enqueueClaiming has rep enqueue ps through q, claiming up to max, and folds into the model the
// ledgers its claim took.
func (r *run) enqueueClaiming(rep *replica, q *store.Queue, ps []store.EnqueueParams, max int) (
	written []store.Ticket, errs []error, res store.ClaimResult, err error) {
	r.folds(func() {
		written, errs, res, err = q.EnqueueClaiming(r.ctx, ps, store.ClaimParams{Max: max, Owner: rep.id, MinRemaining: r.minRem})
	})
	return written, errs, res, err
}

// addWritten adds to the model the tickets ts of ps that EnqueueClaiming wrote: each one naming a
// limit the model does not have must have been refused with ErrUnknownLimit, and no other.
func (r *run) addWritten(ps []store.EnqueueParams, ts []*sim.Ticket, written []store.Ticket, errs []error) {
	for i := range ps {
		switch {
		case !r.m.Knows(ts[i].Keys):
			if !errors.Is(errs[i], store.ErrUnknownLimit) {
				r.fail("enqueue claiming a ticket naming a deleted limit: got %v, want ErrUnknownLimit", errs[i])
			}
		case errs[i] != nil:
			r.fail("enqueue claiming: ticket %d: %v", i, errs[i])
		default:
			r.add(ts[i], written[i])
		}
	}
}

// linesOf is the set of the lines of ps.
func linesOf(ps []store.EnqueueParams) map[string]bool {
	lines := map[string]bool{}
	for _, p := range ps {
		lines[p.LimitKeys[0]] = true
	}
	return lines
}

// knows reports whether the model has every limit the tickets ts name.
func (r *run) knows(ts []*sim.Ticket) bool {
	for _, t := range ts {
		if !r.m.Knows(t.Keys) {
			return false
		}
	}
	return true
}

// drawTickets draws one to three tickets for rep to enqueue in one batch.
func (r *run) drawTickets(rep *replica) ([]store.EnqueueParams, []*sim.Ticket) {
	n := rapid.IntRange(1, 3).Draw(r.t, "tickets")
	ps := make([]store.EnqueueParams, n)
	ts := make([]*sim.Ticket, n)
	for i := range ps {
		ps[i], ts[i] = r.drawTicket(rep)
	}
	return ps, ts
}

func (r *run) drawTicket(rep *replica) (store.EnqueueParams, *sim.Ticket) {
	t := r.t
	keys := []string{rapid.SampledFrom(lines).Draw(t, "line")}
	if rapid.IntRange(0, 2).Draw(t, "tenanted") > 0 {
		keys = append(keys, rapid.SampledFrom(tenants).Draw(t, "tenant"))
	}
	cost := rapid.SampledFrom(costs).Draw(t, "cost")
	output := cost * int64(rapid.IntRange(0, 4).Draw(t, "output_quarters")) / 4
	money := rapid.SampledFrom([]int64{0, 0, 1000, 10000, 60000}).Draw(t, "money")
	var deadline, notBefore time.Time
	if rapid.IntRange(0, 3).Draw(t, "has_deadline") == 0 {
		deadline = r.now().Add(rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour, 48 * time.Hour}).Draw(t, "deadline"))
	}
	if rapid.IntRange(0, 5).Draw(t, "has_not_before") == 0 {
		notBefore = r.now().Add(rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, time.Minute}).Draw(t, "not_before"))
	}
	r.acts++
	act := fmt.Sprintf("a%d", r.acts)
	p := store.EnqueueParams{LimitKeys: keys, Cost: cost, OutputCost: output, CostMoney: money,
		Priority:    rapid.IntRange(0, 1).Draw(t, "priority"),
		FairnessKey: rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "fairness"),
		Owner:       rep.id, Namespace: "ns", WorkflowID: "wf", RunID: "run", ActivityID: act, ActivityType: "Call",
		Attempt: 1, Deadline: deadline, NotBefore: notBefore}
	return p, &sim.Ticket{Owner: rep.id, Keys: keys, Cost: admit.CostOf(cost, output), Money: money,
		Deadline: deadline, NotBefore: notBefore, Activity: act, Attempt: 1}
}

func (r *run) add(t *sim.Ticket, w store.Ticket) {
	t.Index, t.ID, t.State = len(r.m.Tickets), w.ID, sim.Queued
	r.m.Tickets = append(r.m.Tickets, t)
	r.byID[w.ID] = t
}

// ledgerKeys are the keys with rows in a ledger (sluice_release, or the allowance ledger).
func (r *run) ledgerKeys(table string) map[string]bool {
	rows, err := r.env.admin.Query(r.ctx, `SELECT DISTINCT key FROM `+pgx.Identifier{r.env.schema, table}.Sanitize())
	if err != nil {
		r.fail("read %s: %v", table, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		r.fail("read %s: %v", table, err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// folds runs op and applies to the model the folds of the ledgers op did: the keys whose ledger rows
// it took, at its instant.
func (r *run) folds(op func()) {
	before, beforeSpends := r.ledgerKeys("sluice_release"), r.ledgerKeys("sluice_allowance_release")
	op()
	after, afterSpends := r.ledgerKeys("sluice_release"), r.ledgerKeys("sluice_allowance_release")
	for k := range before {
		if !after[k] {
			r.m.Fold(k, r.now())
		}
	}
	for k := range beforeSpends {
		if !afterSpends[k] {
			r.m.FoldSpends(k, r.now())
		}
	}
}

func (r *run) claim(rep *replica, max, maxLines int) {
	var res store.ClaimResult
	var err error
	r.folds(func() {
		res, err = rep.q.Claim(r.ctx, store.ClaimParams{Max: max, MaxLines: maxLines, Owner: rep.id, MinRemaining: r.minRem})
	})
	if err != nil {
		r.fail("claim by %s failed (no fault was injected): %v", rep.id, err)
	}
	r.claimed(rep, res)
	if len(res.Admitted) < max && !res.More && maxLines >= len(allKeys) {
		r.checkNothingAdmissible(r.now(), nil)
	}
}

// claimed checks what a claim by rep did against the model and applies it there.
func (r *run) claimed(rep *replica, res store.ClaimResult) {
	now := r.now()
	for _, a := range res.Admitted {
		t := r.ticket(a.ID)
		if t.State != sim.Queued {
			r.fail("claim admitted ticket #%d (id %d), which the model has %s", t.Index, t.ID, t.State)
		}
		if !a.AdmittedAt.Equal(now) {
			r.fail("ticket %d admitted at %s, the claim's instant is %s", a.ID, a.AdmittedAt, now)
		}
		if !t.NotBefore.IsZero() && now.Before(t.NotBefore) {
			r.fail("ticket #%d admitted before its not-before time %s", t.Index, t.NotBefore)
		}
		if !t.Deadline.IsZero() && !now.Add(r.minRem).Before(t.Deadline) {
			r.fail("ticket #%d admitted at or past its deadline %s", t.Index, t.Deadline)
		}
		if err := r.m.Admit(t, now); err != nil {
			r.fail("%v (the claim admitted, in order, %v)", err, ticketIDs(res.Admitted))
		}
		for _, k := range t.Keys {
			d := r.drawn[usageAt{k, now.Unix()}]
			d.requests++
			d.tokens += t.Cost.Total()
			d.input += t.Cost.Input
			r.drawn[usageAt{k, now.Unix()}] = d
		}
		global.mu.Lock()
		global.admissions++
		global.mu.Unlock()
		if t.Owner == rep.id || r.listens(t.Owner) {
			t.State = sim.Running // the claimer's own, or a listening owner's: no take
		}
	}
	for _, e := range res.Expired {
		t := r.ticket(e.ID)
		if t.Deadline.IsZero() || now.Add(r.minRem).Before(t.Deadline) {
			r.fail("ticket #%d expired at %s, its deadline is %v", t.Index, now, t.Deadline)
		}
		r.end(t, sim.Gone, "expired")
	}
	for _, f := range res.Refused {
		t := r.ticket(f.ID)
		if err := r.m.JustifyRefusal(t, now); err != nil && !skip("refunds") {
			r.fail("%v", err)
		}
		global.mu.Lock()
		global.refusals++
		global.mu.Unlock()
		r.end(t, sim.Finished, "refused")
	}
}

// checkNothingAdmissible fails when a queued ticket that a claim with budget left reached could have
// been admitted: in each line (of lines, or every line when nil), in line order, every ticket up to
// the first that its line's own limit holds must be held by one of its other limits.
func (r *run) checkNothingAdmissible(now time.Time, lines map[string]bool) {
	rows, err := r.env.admin.Query(r.ctx, `SELECT id, line_key FROM `+pgx.Identifier{r.env.schema}.Sanitize()+
		`.sluice_ticket WHERE state = 'queued' ORDER BY line_key, priority, vstart, seq`)
	if err != nil {
		r.fail("read lines: %v", err)
	}
	type queued struct {
		id   int64
		line string
	}
	qs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (queued, error) {
		var q queued
		return q, row.Scan(&q.id, &q.line)
	})
	if err != nil {
		r.fail("read lines: %v", err)
	}
	blocked := map[string]bool{}
	for _, q := range qs {
		if blocked[q.line] || (lines != nil && !lines[q.line]) {
			continue
		}
		t := r.ticket(q.id)
		if !t.NotBefore.IsZero() && now.Before(t.NotBefore) {
			continue
		}
		if !t.Deadline.IsZero() && !now.Add(r.minRem).Before(t.Deadline) {
			r.fail("ticket #%d (id %d) is past its deadline and still queued after a claim with budget left", t.Index, t.ID)
		}
		ref, ok := r.m.Check(t, now)
		if ok {
			r.fail("stall: ticket #%d (id %d, line %q, keys %v, cost %+v) has room on every limit, yet a claim with budget left did not admit it",
				t.Index, t.ID, q.line, t.Keys, t.Cost)
		}
		if ref.Key == q.line {
			blocked[q.line] = true
		}
	}
}

// ticketIDs are the IDs of ts, in order.
func ticketIDs(ts []store.Ticket) []int64 {
	ids := make([]int64, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	return ids
}

func (r *run) ticket(id int64) *sim.Ticket {
	t := r.byID[id]
	if t == nil {
		r.fail("the engine returned ticket %d, which the simulation never wrote", id)
	}
	return t
}

func (r *run) end(t *sim.Ticket, state sim.TicketState, kind string) {
	t.Ends++
	if t.Ends > 1 {
		r.fail("ticket #%d (id %d) ended twice: %s, then %s", t.Index, t.ID, t.Kind, kind)
	}
	t.State, t.Kind = state, kind
	t.FinishedAt = r.now()
}

func (r *run) take(rep *replica) {
	ts, err := rep.q.TakeAdmitted(r.ctx, rep.id, rapid.IntRange(1, 10).Draw(r.t, "take_max"))
	if err != nil {
		r.fail("take: %v", err)
	}
	for _, w := range ts {
		t := r.ticket(w.ID)
		if t.State != sim.Admitted || t.Owner != rep.id {
			r.fail("take by %s returned ticket #%d, which the model has %s, owned by %s", rep.id, t.Index, t.State, t.Owner)
		}
		t.State = sim.Running
	}
}

// listens reports whether owner's lease row says it listens: a claim moves its tickets straight to
// running.
func (r *run) listens(owner string) bool {
	rep := r.replica(owner)
	return rep != nil && rep.listens
}

// read has rep read its running tickets, as a listening owner does when its notifications may have
// been missed: they must be exactly the model's running tickets of rep.
func (r *run) read(rep *replica) {
	ts, err := rep.q.RunningTickets(r.ctx, rep.id, nil)
	if err != nil {
		r.fail("read running tickets of %s: %v", rep.id, err)
	}
	var want []int64
	for _, t := range r.m.Tickets {
		if t.State == sim.Running && t.Owner == rep.id {
			want = append(want, t.ID)
		}
	}
	slices.Sort(want)
	got := make([]int64, 0, len(ts))
	for _, t := range ts {
		got = append(got, t.ID)
	}
	if !slices.Equal(got, want) {
		r.fail("running tickets of %s: Postgres has %v, the model %v", rep.id, got, want)
	}
}

// listen switches whether rep listens for its admissions, as a replica does when it starts or stops.
func (r *run) listen(rep *replica) {
	rep.listens = !rep.listens
	var err error
	if rep.listens {
		_, err = rep.q.RenewListening(r.ctx, rep.id, leaseTTL, true)
	} else {
		err = rep.q.StopListening(r.ctx, rep.id)
	}
	if err != nil {
		r.fail("listen %v by %s: %v", rep.listens, rep.id, err)
	}
}

// pick draws a ticket in one of states, owned by a live replica when live is set; nil when there is
// none.
func (r *run) pick(live bool, states ...sim.TicketState) *sim.Ticket {
	var c []*sim.Ticket
	for _, t := range r.m.Tickets {
		if slices.Contains(states, t.State) && (!live || r.alive(t.Owner)) {
			c = append(c, t)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[rapid.IntRange(0, len(c)-1).Draw(r.t, "pick")]
}

func (r *run) alive(owner string) bool {
	for _, rep := range r.reps {
		if rep.id == owner {
			return rep.alive
		}
	}
	return false
}

func (r *run) replica(owner string) *replica {
	for _, rep := range r.reps {
		if rep.id == owner {
			return rep
		}
	}
	return nil
}

// drawUsage draws what a run reports: nothing, none, less, all, more than it reserved, or an absurd
// figure.
func (r *run) drawUsage(t *sim.Ticket) sim.Usage {
	reserved := t.Cost.Total()
	choices := []int64{-1, 0, reserved / 2, reserved, reserved * 2, 1 << 62, math.MaxInt64}
	if skip("absurd") {
		choices = choices[:5]
	}
	total := rapid.SampledFrom(choices).Draw(r.t, "usage")
	u := sim.Usage{Total: total, Money: -1}
	if total > 0 {
		u.Output = total * int64(rapid.IntRange(0, 2).Draw(r.t, "usage_output_halves")) / 2
	}
	switch rapid.IntRange(0, 3).Draw(r.t, "usage_money") {
	case 1:
		u.Money = t.Money / 2
	case 2:
		u.Money = t.Money * 3
	case 3:
		if !skip("absurd") {
			u.Money = 1 << 62
		}
	}
	return u
}

func (r *run) complete() {
	t := r.pick(true, sim.Running)
	if t == nil {
		return
	}
	u, delivered, err := r.completeWith(r.replica(t.Owner).q, t)
	if err != nil {
		r.fail("complete ticket #%d (id %d): %v", t.Index, t.ID, err)
	}
	r.completed(t, u, delivered)
}

// completeWith has q complete t with a usage drawn at random, and returns the usage as the model
// takes it and whether the outcome was delivered before the completion.
func (r *run) completeWith(q *store.Queue, t *sim.Ticket) (sim.Usage, bool, error) {
	u := r.drawUsage(t)
	money := u.Money
	if money < 0 {
		money = 0
	}
	// A gate's permit ends with the pending outcome: its run completed Acquire itself, so there is
	// nothing to deliver, and its accounting is a completion's.
	kind := rapid.SampledFrom([]string{store.OutcomeCompleted, store.OutcomePending}).Draw(r.t, "outcome_kind")
	// The runner delivers first, and a delivered outcome's completion deletes its ticket; one
	// Temporal did not take (an outage) is kept finished for the delivery loop.
	delivered := rapid.Bool().Draw(r.t, "delivered")
	err := q.Complete(r.ctx, store.CompleteParams{TicketID: t.ID, ActualCost: u.Total, ActualOutput: u.Output,
		ActualMoney: money, OutcomeKind: kind, Delivered: delivered})
	if money == 0 {
		u.Money = -1
	}
	return u, delivered, err
}

// completed applies t's completion with usage u to the model: its ticket is gone when the outcome
// was delivered before, else finished, waiting for delivery.
func (r *run) completed(t *sim.Ticket, u sim.Usage, delivered bool) {
	r.ranFor(t)
	r.m.Complete(t, u)
	if delivered {
		r.end(t, sim.Gone, "completed")
		return
	}
	r.end(t, sim.Finished, "completed")
}

func (r *run) cancel() {
	t := r.pick(false, sim.Queued, sim.Admitted)
	if t == nil {
		return
	}
	if err := r.reps[len(r.reps)-1].q.Cancel(r.ctx, t.ID); err != nil {
		r.fail("cancel ticket #%d (id %d, %s): %v", t.Index, t.ID, t.State, err)
	}
	if t.State == sim.Admitted {
		r.m.ReleaseNow(t, r.now(), sim.Usage{Void: true})
	}
	r.end(t, sim.Gone, "canceled")
}

func (r *run) requeue() {
	t := r.pick(true, sim.Running)
	if t == nil {
		return
	}
	until := r.now().Add(rapid.SampledFrom([]time.Duration{time.Millisecond, time.Second, time.Minute}).Draw(r.t, "retry_after"))
	actual := rapid.SampledFrom([]int64{0, -1}).Draw(r.t, "requeue_actual")
	err := r.replica(t.Owner).q.Requeue(r.ctx, store.RequeueParams{TicketID: t.ID, NotBefore: until, ActualCost: actual,
		PauseKeys: []string{t.Keys[0]}, PauseUntil: until})
	if err != nil {
		r.fail("requeue ticket #%d: %v", t.Index, err)
	}
	r.m.ReleaseNow(t, r.now(), sim.Usage{Total: actual, Money: -1})
	r.m.Pause(t.Keys[0], until)
	t.State, t.NotBefore, t.AdmittedAt, t.Charged = sim.Queued, until, time.Time{}, nil
}

// tick moves the clock: a hair, seconds, minutes, hours, to just before or after the next local
// midnight in Los Angeles, or days.
func (r *run) tick() {
	var d time.Duration
	switch rapid.IntRange(0, 6).Draw(r.t, "tick_kind") {
	case 0:
		d = time.Duration(rapid.IntRange(1, 1000).Draw(r.t, "tick_us")) * time.Microsecond
	case 1:
		d = time.Duration(rapid.IntRange(1, 5000).Draw(r.t, "tick_ms")) * time.Millisecond
	case 2:
		d = time.Duration(rapid.IntRange(1, 600).Draw(r.t, "tick_s")) * time.Second
	case 3:
		d = time.Duration(rapid.IntRange(1, 180).Draw(r.t, "tick_min")) * time.Minute
	case 4:
		la, _ := time.LoadLocation("America/Los_Angeles")
		n := r.now().In(la)
		midnight := time.Date(n.Year(), n.Month(), n.Day()+1, 0, 0, 0, 0, la)
		d = midnight.Sub(r.now()) + time.Duration(rapid.IntRange(-2000, 2000).Draw(r.t, "around_midnight_ms"))*time.Millisecond
	case 5:
		d = time.Duration(rapid.IntRange(1, 40).Draw(r.t, "tick_h")) * time.Hour
	default:
		d = time.Duration(rapid.IntRange(1, 9).Draw(r.t, "tick_days")) * 24 * time.Hour
	}
	if d <= 0 {
		d = time.Microsecond
	}
	r.clock.add(d)
	r.renew()
}

// resize changes one allowance of a key: its amount, its policy, or adds or removes one.
func (r *run) resize() {
	key := rapid.SampledFrom(allKeys).Draw(r.t, "key")
	if r.m.Keys[key] == nil {
		return // deleted: a change creates it again
	}
	l := r.m.Keys[key].Limit
	l.Allowances = slices.Clone(l.Allowances)
	switch rapid.IntRange(0, 2).Draw(r.t, "resize_kind") {
	case 0:
		if len(l.Allowances) > 0 {
			i := rapid.IntRange(0, len(l.Allowances)-1).Draw(r.t, "which")
			l.Allowances[i].Amount = max(1, l.Allowances[i].Amount*int64(rapid.IntRange(1, 4).Draw(r.t, "times"))/2)
		}
	case 1:
		if len(l.Allowances) > 0 {
			i := rapid.IntRange(0, len(l.Allowances)-1).Draw(r.t, "which")
			l.Allowances = slices.Delete(l.Allowances, i, i+1)
		}
	default:
		a, _ := throttle.ParseAllowance(rapid.SampledFrom(allowanceMenu).Draw(r.t, "allowance"))
		if !slices.ContainsFunc(l.Allowances, func(b throttle.Allowance) bool { return b.Key() == a.Key() }) {
			l.Allowances = append(l.Allowances, a)
		}
	}
	if len(l.Allowances) == 0 {
		l.Allowances = nil
	}
	if l.Validate() != nil {
		return
	}
	r.upsert(l)
}

// kill stops a replica: it renews no lease, claims, runs and completes nothing more. The last live
// replica is never killed.
func (r *run) kill() {
	var alive []*replica
	for _, rep := range r.reps {
		if rep.alive {
			alive = append(alive, rep)
		}
	}
	if len(alive) < 2 {
		return
	}
	alive[rapid.IntRange(0, len(alive)-1).Draw(r.t, "victim")].alive = false
}

// handBack has rep hand back the tickets of owners whose lease lapsed.
func (r *run) handBack(rep *replica) {
	ts, err := rep.q.HandBack(r.ctx, store.HandBackParams{Max: 1000})
	if err != nil {
		r.fail("hand back: %v", err)
	}
	for _, w := range ts {
		t := r.ticket(w.ID)
		if r.alive(t.Owner) {
			r.fail("ticket #%d of live replica %s was handed back", t.Index, t.Owner)
		}
		switch t.State {
		case sim.Admitted:
			r.m.ReleaseNow(t, r.now(), sim.Usage{Void: true})
		case sim.Running:
			r.m.ReleaseNow(t, r.now(), sim.Usage{Total: -1, Money: -1})
		case sim.Queued:
		default:
			r.fail("ticket #%d handed back in state %s", t.Index, t.State)
		}
		r.end(t, sim.Finished, "handed_back")
	}
}

func (r *run) deliver(rep *replica) {
	ts, err := rep.q.TakeDeliveries(r.ctx, 100, time.Minute)
	if err != nil {
		r.fail("take deliveries: %v", err)
	}
	for _, w := range ts {
		t := r.ticket(w.ID)
		if t.State != sim.Finished {
			r.fail("delivery of ticket #%d, which the model has %s", t.Index, t.State)
		}
		if err := rep.q.Delivered(r.ctx, w.ID); err != nil {
			r.fail("delivered: %v", err)
		}
		if t.Kind == "handed_back" {
			t.State = sim.Returned
		} else {
			t.State = sim.Gone
		}
	}
}

// retry enqueues the next attempt of a handed-back activity, as Temporal's retry of it does.
func (r *run) retry() {
	old := r.pick(false, sim.Returned)
	if old == nil {
		return
	}
	rep := r.live()
	if !r.m.Knows(old.Keys) { // one of its limits was deleted: the retry fails, the place stays
		_, err := rep.q.Enqueue(r.ctx, store.EnqueueParams{LimitKeys: old.Keys, Owner: rep.id, Namespace: "ns", WorkflowID: "wf",
			RunID: "run", ActivityID: old.Activity, ActivityType: "Call", Attempt: old.Attempt + 1})
		if !errors.Is(err, store.ErrUnknownLimit) {
			r.fail("retry of #%d naming a deleted limit (%v): got %v, want ErrUnknownLimit", old.Index, old.Keys, err)
		}
		return
	}
	p := store.EnqueueParams{LimitKeys: old.Keys, Cost: old.Cost.Total(), OutputCost: old.Cost.Output, CostMoney: old.Money,
		Owner: rep.id, Namespace: "ns", WorkflowID: "wf", RunID: "run", ActivityID: old.Activity, ActivityType: "Call",
		Attempt: old.Attempt + 1}
	w, err := rep.q.Enqueue(r.ctx, p)
	if err != nil {
		r.fail("enqueue retry of #%d: %v", old.Index, err)
	}
	old.State = sim.Gone // the retry takes its place
	r.add(&sim.Ticket{Owner: rep.id, Keys: old.Keys, Cost: old.Cost, Money: old.Money, Activity: old.Activity,
		Attempt: old.Attempt + 1}, w)
}

func (r *run) prune() {
	if _, err := r.live().q.Prune(r.ctx, store.PruneParams{}); err != nil {
		r.fail("prune: %v", err)
	}
	for _, t := range r.m.Tickets {
		if t.State == sim.Returned && t.FinishedAt.Before(r.now().Add(-time.Hour)) {
			t.State = sim.Gone
		}
	}
}

// deleteLimit deletes a key drawn at random, or one that never existed: the model predicts the
// refusal of a key in use (with how many tickets name it) or unknown, and otherwise forgets the key;
// the engine's usage and run-time rows of the key go with it.
func (r *run) deleteLimit() {
	key := rapid.SampledFrom(append(slices.Clone(allKeys), "never")).Draw(r.t, "delete_key")
	inUse, known := r.m.Delete(key)
	err := r.reps[0].q.DeleteLimit(r.ctx, key)
	switch {
	case !known:
		if !errors.Is(err, store.ErrUnknownLimit) {
			r.fail("delete unknown limit %q: got %v, want ErrUnknownLimit", key, err)
		}
		global.addDeletion("unknown")
	case inUse > 0:
		if !errors.Is(err, store.ErrLimitInUse) || !strings.Contains(err.Error(), fmt.Sprintf("is named by %d unfinished tickets", inUse)) {
			r.fail("delete limit %q that %d unfinished tickets name: got %v, want ErrLimitInUse with the count", key, inUse, err)
		}
		global.addDeletion("in_use")
	default:
		if err != nil {
			r.fail("delete limit %q, which no unfinished ticket names: %v", key, err)
		}
		for at := range r.drawn {
			if at.key == key {
				delete(r.drawn, at)
			}
		}
		for at := range r.runTimes {
			if at.key == key {
				delete(r.runTimes, at)
			}
		}
		global.addDeletion("deleted")
	}
}
