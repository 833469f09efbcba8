package sim_test

import (
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testkit/faultproxy"
)

// lost runs one operation of a live replica (an enqueue, a claim or a completion) through the fault
// proxy, armed to lose the first round trip that ends a transaction: before it reaches the server
// (nothing of it commits) or after it ran there (it committed; the answer is lost). Either way the
// replica hears a broken connection. The simulation then learns from Postgres what happened, as the
// dispatcher's self-check does (OwnerTickets), and holds that to the model like any other outcome:
// each admission of a claim whose answer was lost must have had room, each refusal must be justified,
// a completion counts once, and an enqueue writes all its tickets or none.
func (r *run) lost() {
	rep := r.live()
	at := faultproxy.AfterRun
	if rapid.IntRange(0, 3).Draw(r.t, "lost_before_send") == 0 {
		at = faultproxy.BeforeSend
	}
	fault := r.env.proxy.Arm(at, endsTx)
	defer r.env.proxy.Disarm()
	switch rapid.SampledFrom([]string{"enqueue", "enqueueclaim", "claim", "claim", "complete"}).Draw(r.t, "lost_op") {
	case "enqueue":
		r.lostEnqueue(rep, fault)
	case "enqueueclaim":
		r.lostEnqueueClaim(rep, fault)
	case "claim":
		r.lostClaim(rep, fault)
	default:
		r.lostComplete(fault)
	}
}

// endsTx matches a round trip whose outcome a lost answer leaves uncertain: one that commits, or one
// run outside a transaction. pgx's liveness ping is not the caller's.
func endsTx(rt faultproxy.RoundTrip) bool {
	if len(rt.Statements) == 1 && strings.TrimSpace(rt.Statements[0]) == "-- ping" {
		return false
	}
	return rt.Commits() || len(rt.Tx) == 0
}

// faultyApp is the application_name of the connections through the fault proxy (to tell them apart
// in pg_stat_activity).
const faultyApp = "sluice-sim-through-proxy"

// faulted fails the run unless err is the fault's doing: an error with no fault fired is a real one.
// It then waits until the transaction a dropped connection may have left open on the server (a COMMIT
// lost before it was sent) has ended, as it does once the server notices the connection closed: until
// then its row locks would make the next claim skip a line, which the stall check would take for a
// stall. It waits by taking those locks itself.
func (r *run) faulted(what string, fault *faultproxy.Fault, err error) {
	// The proxy marks the fault fired as it drops the connection, which the client may hear first:
	// wait for the mark (a minute is an outer bound; it comes at once).
	select {
	case <-fault.Fired():
		global.addLost(what)
	case <-time.After(time.Minute):
		r.fail("%s through the fault proxy failed, and no fault fired: %v", what, err)
	}
	s := pgx.Identifier{r.env.schema}.Sanitize()
	err = pgx.BeginFunc(r.ctx, r.env.admin, func(tx pgx.Tx) error {
		for _, stmt := range []string{`SET LOCAL lock_timeout = '1min'`, `SELECT 1 FROM ` + s + `.sluice_limit FOR UPDATE`,
			`SELECT 1 FROM ` + s + `.sluice_ticket FOR UPDATE`} {
			if _, err := tx.Exec(r.ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.fail("wait for the dropped connection's transaction to end: %v", err)
	}
}

func (r *run) lostEnqueue(rep *replica, fault *faultproxy.Fault) {
	ps, ts := r.drawTickets(rep)
	if !r.knows(ts) { // refused before anything could commit: no answer to lose
		r.env.proxy.Disarm()
		r.enqueueBatch(rep.q, ps, ts)
		return
	}
	written, err := rep.fq.EnqueueMany(r.ctx, ps)
	r.env.proxy.Disarm()
	if err == nil {
		for i, w := range written {
			r.add(ts[i], w)
		}
		return
	}
	r.faulted("enqueue", fault, err)
	ids := r.ticketsOf(ps)
	if len(ids) != 0 && len(ids) != len(ps) {
		r.fail("an enqueue of %d tickets whose answer was lost wrote %d of them", len(ps), len(ids))
	}
	for i, p := range ps {
		if id, ok := ids[p.ActivityID]; ok {
			r.add(ts[i], store.Ticket{ID: id})
		}
	}
}

// lostEnqueueClaim runs an EnqueueClaiming whose answer is lost, and learns what it did: its tickets
// written, all of them or none (the model's tickets naming a deleted limit never are), and its claim's
// decisions, held to the model as any claim's.
func (r *run) lostEnqueueClaim(rep *replica, fault *faultproxy.Fault) {
	ps, ts := r.drawTickets(rep)
	max := rapid.IntRange(1, 6).Draw(r.t, "max")
	written, errs, res, err := r.enqueueClaiming(rep, rep.fq, ps, max)
	r.env.proxy.Disarm()
	if err == nil {
		r.addWritten(ps, ts, written, errs)
		r.claimed(rep, res)
		return
	}
	r.faulted("enqueueclaim", fault, err)
	ids := r.ticketsOf(ps)
	// Committed, the enqueue wrote every ticket naming known limits, and its claim deleted those
	// already past their deadline: the others are all there, or none is.
	var kept, expirable int
	for i, p := range ps {
		_, ok := ids[p.ActivityID]
		switch {
		case !r.m.Knows(ts[i].Keys):
			if ok {
				r.fail("an enqueue claiming whose answer was lost wrote ticket %d, which names a deleted limit", i)
			}
		case !ts[i].Deadline.IsZero() && !r.now().Add(r.minRem).Before(ts[i].Deadline):
			expirable++
		default:
			kept++
		}
	}
	if n := len(ids); n != 0 && (n < kept || n > kept+expirable) {
		r.fail("an enqueue claiming %d tickets (%d to keep, %d past their deadline) whose answer was lost left %d of them",
			len(ps), kept, expirable, n)
	}
	for i, p := range ps {
		if id, ok := ids[p.ActivityID]; ok {
			r.add(ts[i], store.Ticket{ID: id})
		}
	}
	r.claimed(rep, r.learnClaim())
}

// ticketsOf reads the IDs of the tickets of ps in Postgres, by their activity IDs.
func (r *run) ticketsOf(ps []store.EnqueueParams) map[string]int64 {
	acts := make([]string, len(ps))
	for i, p := range ps {
		acts[i] = p.ActivityID
	}
	ids := map[string]int64{}
	var act string
	var id int64
	r.eachRow("tickets", `SELECT activity_id, id FROM `+pgx.Identifier{r.env.schema}.Sanitize()+
		`.sluice_ticket WHERE activity_id = ANY($1)`, []any{acts}, []any{&act, &id}, func() { ids[act] = id })
	return ids
}

func (r *run) lostClaim(rep *replica, fault *faultproxy.Fault) {
	var res store.ClaimResult
	var err error
	r.folds(func() {
		res, err = rep.fq.Claim(r.ctx, store.ClaimParams{Max: rapid.IntRange(1, 6).Draw(r.t, "max"), MaxLines: 256,
			Owner: rep.id, MinRemaining: r.minRem})
	})
	r.env.proxy.Disarm()
	if err == nil {
		r.claimed(rep, res)
		return
	}
	r.faulted("claim", fault, err)
	r.claimed(rep, r.learnClaim())
}

// learnClaim reads from Postgres what a claim whose answer was lost did: the tickets the model has
// queued that it admitted, refused or expired (deleted). The admissions come in the order the claim
// decided them, which the model needs (an oversize ticket is admitted once nothing is in flight, so
// whether a zero-cost ticket came before it matters): line by line in key order (the fault proxy's
// queues only claim through every line, so their line cursor never moves from the first), and in each
// line in line order (admission leaves priority, vstart and seq as they were).
func (r *run) learnClaim() store.ClaimResult {
	type row struct {
		state    store.TicketState
		outcome  string
		admitted store.Ticket
	}
	got := map[int64]row{}
	var order []int64
	var x row
	var at *time.Time
	r.eachRow("tickets", `SELECT id, state, coalesce(outcome_kind, ''), admitted_at FROM `+pgx.Identifier{r.env.schema}.Sanitize()+
		`.sluice_ticket ORDER BY line_key, priority, vstart, seq`, nil, []any{&x.admitted.ID, &x.state, &x.outcome, &at}, func() {
		x.admitted.AdmittedAt = time.Time{}
		if at != nil {
			x.admitted.AdmittedAt = at.UTC()
		}
		got[x.admitted.ID] = x
		order = append(order, x.admitted.ID)
	})
	var res store.ClaimResult
	for _, t := range r.m.Tickets {
		if t.State != sim.Queued {
			continue
		}
		x, ok := got[t.ID]
		switch {
		case !ok:
			res.Expired = append(res.Expired, store.Ticket{ID: t.ID})
		case x.state == store.TicketStateAdmitted || x.state == store.TicketStateRunning:
			// added below, in the claim's order
		case x.state == store.TicketStateFinished && x.outcome == store.OutcomeRefused:
			res.Refused = append(res.Refused, store.Ticket{ID: t.ID})
		case x.state != store.TicketStateQueued:
			r.fail("a claim whose answer was lost left queued ticket #%d (id %d) %s (%s)", t.Index, t.ID, x.state, x.outcome)
		}
	}
	for _, id := range order {
		if t := r.byID[id]; t != nil && t.State == sim.Queued {
			if x := got[id]; x.state == store.TicketStateAdmitted || x.state == store.TicketStateRunning {
				res.Admitted = append(res.Admitted, x.admitted)
			}
		}
	}
	return res
}

func (r *run) lostComplete(fault *faultproxy.Fault) {
	t := r.pick(true, sim.Running)
	if t == nil {
		return
	}
	u, delivered, err := r.completeWith(r.replica(t.Owner).fq, t)
	r.env.proxy.Disarm()
	if err == nil {
		r.completed(t, u, delivered)
		return
	}
	r.faulted("complete", fault, err)
	var state store.TicketState
	err = r.env.admin.QueryRow(r.ctx, `SELECT state FROM `+pgx.Identifier{r.env.schema}.Sanitize()+
		`.sluice_ticket WHERE id = $1`, t.ID).Scan(&state)
	gone := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !gone {
		r.fail("read ticket #%d: %v", t.Index, err)
	}
	switch {
	case gone && delivered, state == store.TicketStateFinished && !delivered:
		// Committed: a delivered outcome's completion deletes its ticket, another keeps it finished.
		r.completed(t, u, delivered)
	case state == store.TicketStateRunning: // not committed: the dispatcher completes it again later
	default:
		r.fail("a completion of ticket #%d (delivered %v) whose answer was lost left it %q (row gone: %v)", t.Index, delivered, state, gone)
	}
}
