package sim_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/internal/testkit/testdb"
	"github.com/sluicehq/sluice/internal/testkit/testenv"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The simulation's shape: a few replicas, two provider lines and three tenants.
const (
	replicas = 3
	leaseTTL = 30 * time.Second
)

var (
	lines   = []string{"p0", "p1"}
	tenants = []string{"t0", "t1", "t2"}
	allKeys = append(slices.Clone(lines), tenants...)
)

// starts are the instants a run's clock starts at: ordinary days, and the hours before the changes
// of daylight saving time in Los Angeles and Berlin, and before month ends.
var starts = []time.Time{
	time.Date(2026, 3, 8, 9, 30, 0, 0, time.UTC),   // 01:30 PST: DST begins at 02:00
	time.Date(2026, 11, 1, 8, 30, 0, 0, time.UTC),  // 01:30 PDT: DST ends at 02:00
	time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC),  // 01:30 CET: Berlin's DST begins
	time.Date(2026, 1, 31, 23, 50, 0, 0, time.UTC), // a month's last minutes in UTC
	time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC),
}

// allowanceMenu is what limits draw their allowances from: calendar windows in zones with daylight
// saving time, rolling windows, every meter.
var allowanceMenu = []string{
	"tokens=3000/day@America/Los_Angeles",
	"requests=6/hour",
	"usd=0.05/day@America/Los_Angeles",
	"output_tokens=2000/10m",
	"tokens=5000/1h",
	"requests=20/week@Europe/Berlin",
	"input_tokens=4000/month",
}

// stats are what the runs did, for the summary.
type stats struct {
	mu         sync.Mutex
	ops        map[string]int
	runs       int
	simulated  time.Duration
	admissions int
	refusals   int
}

func (s *stats) add(op string) { s.mu.Lock(); s.ops[op]++; s.mu.Unlock() }

var global = &stats{ops: map[string]int{}}

// TestSim runs the simulation: SIM_TIME (a duration) of random runs, or, when unset, a short run of
// a fixed seed (what make test runs). SEED fixes rapid's seed. A failure prints the seed and the
// shrunk sequence of operations, and writes a fail file that -rapid.failfile replays.
func TestSim(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t, pool)
	env := &simEnv{admin: pool, schema: schema}
	for i := range replicas {
		cfg := testdb.PoolConfig(t)
		cfg.MaxConns = 2
		p := testdb.PoolWith(t, cfg)
		env.pools = append(env.pools, p)
		_ = i
	}
	budget, _ := time.ParseDuration(os.Getenv("SIM_TIME"))
	if budget <= 0 {
		// The short form: a fixed seed unless SEED is given, a few runs.
		setFlag(t, "rapid.seed", cmpOr(os.Getenv("SEED"), "20261206"))
		setFlag(t, "rapid.checks", "12")
		setFlag(t, "rapid.steps", "60")
		rapid.Check(t, env.run)
	} else {
		if s := os.Getenv("SEED"); s != "" {
			setFlag(t, "rapid.seed", s)
		}
		deadline := time.Now().Add(budget)
		for round := 0; time.Now().Before(deadline); round++ {
			ok := t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) { rapid.Check(t, env.run) })
			if !ok {
				break
			}
			if os.Getenv("SEED") != "" {
				break // a fixed seed runs its checks once
			}
		}
	}
	global.mu.Lock()
	defer global.mu.Unlock()
	kinds := make([]string, 0, len(global.ops))
	for k := range global.ops {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	total := 0
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, global.ops[k])
		total += global.ops[k]
	}
	t.Logf("SIM: %d runs, %d operations, %.1f simulated days, %d admissions, %d refusals; by kind:%s",
		global.runs, total, global.simulated.Hours()/24, global.admissions, global.refusals, b.String())
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func setFlag(t *testing.T, name, value string) {
	t.Helper()
	if err := flagSet(name, value); err != nil {
		t.Fatalf("set -%s: %v", name, err)
	}
}

// simEnv is what every run shares: the database, its schema, and one pool per replica.
type simEnv struct {
	admin  *pgxpool.Pool
	schema string
	pools  []*pgxpool.Pool
}

// clock is the virtual clock every replica's queue reads. It moves by whole microseconds, Postgres'
// resolution, so that what the engine stores reads back as the model has it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d).Truncate(time.Microsecond)
	c.mu.Unlock()
}

type replica struct {
	id    string
	q     *pgqueue.Queue
	alive bool
}

// run is one run of the simulation: a fresh schema's tables, limits drawn at random, then rapid's
// random sequence of operations, each followed by the checks, then a drain that must end every
// ticket.
type run struct {
	t      *rapid.T
	ctx    context.Context
	env    *simEnv
	clock  *clock
	start  time.Time
	reps   []*replica
	m      *sim.Model
	byID   map[int64]*sim.Ticket
	minRem time.Duration
	acts   int // activity identities handed out
}

func (e *simEnv) run(t *rapid.T) {
	ctx := context.Background()
	e.reset(t, ctx)
	start := rapid.SampledFrom(starts).Draw(t, "start")
	r := &run{t: t, ctx: ctx, env: e, clock: &clock{t: start}, start: start, m: sim.New(), byID: map[int64]*sim.Ticket{}}
	r.minRem = rapid.SampledFrom([]time.Duration{0, 0, time.Second}).Draw(t, "min_remaining")
	for i, p := range e.pools {
		q, err := pgqueue.New(p, pgqueue.Options{Schema: e.schema, Now: r.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		r.reps = append(r.reps, &replica{id: fmt.Sprintf("r%d", i), q: q, alive: true})
	}
	for _, key := range allKeys {
		r.upsert(r.drawLimit(key))
	}
	r.renew()
	t.Repeat(map[string]func(*rapid.T){
		"":     func(t *rapid.T) { r.check() },
		"step": func(t *rapid.T) { r.step() },
	})
	r.drain()
	global.mu.Lock()
	global.runs++
	global.simulated += r.clock.Now().Sub(start)
	global.mu.Unlock()
}

// reset empties the schema's tables for a new run: faster than a new schema, and the same.
func (e *simEnv) reset(t *rapid.T, ctx context.Context) {
	s := pgx.Identifier{e.schema}.Sanitize()
	tables := []string{"sluice_limit", "sluice_ticket", "sluice_release", "sluice_fair", "sluice_owner", "sluice_usage",
		"sluice_limit_change", "sluice_allowance_release"}
	for i, tb := range tables {
		tables[i] = s + "." + tb
	}
	if _, err := e.admin.Exec(ctx, `TRUNCATE `+strings.Join(tables, ", ")+` RESTART IDENTITY`); err != nil {
		t.Fatal(err)
	}
}

func (r *run) now() time.Time { return r.clock.Now() }

func (r *run) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("at %s: %s\nmodel: %s", r.now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...), r.m.Describe(r.now()))
}

// drawLimit draws a limit for key: any mix of caps, rates, budgets and allowances.
func (r *run) drawLimit(key string) throttle.Limit {
	t := r.t
	l := throttle.Limit{Key: key}
	l.MaxConcurrent = rapid.SampledFrom([]int{0, 0, 1, 2, 4}).Draw(t, "max_concurrent")
	if rps := rapid.SampledFrom([]float64{0, 0, 0.5, 2, 10}).Draw(t, "rps"); rps > 0 {
		l.RequestsPerSecond = rps
		l.Burst = rapid.SampledFrom([]float64{0, 1, 3}).Draw(t, "burst")
	}
	if tpm := rapid.SampledFrom([]float64{0, 0, 600, 6000, 60000}).Draw(t, "tpm"); tpm > 0 {
		l.TokensPerMinute = tpm
		l.TokenBurst = rapid.SampledFrom([]float64{0, 100, 1000}).Draw(t, "token_burst")
	}
	if rapid.IntRange(0, 3).Draw(t, "dims") == 0 {
		l.InputTokensPerMinute = rapid.SampledFrom([]float64{1200, 30000}).Draw(t, "itpm")
		l.OutputTokensPerMinute = rapid.SampledFrom([]float64{300, 6000}).Draw(t, "otpm")
	}
	l.MaxInflightTokens = rapid.SampledFrom([]int64{0, 0, 0, 800, 5000}).Draw(t, "max_inflight_tokens")
	n := rapid.IntRange(0, 2).Draw(t, "allowances")
	seen := map[string]bool{}
	for range n {
		a, err := throttle.ParseAllowance(rapid.SampledFrom(allowanceMenu).Draw(t, "allowance"))
		if err != nil {
			t.Fatal(err)
		}
		a.Amount = max(1, a.Amount*int64(rapid.SampledFrom([]int{1, 1, 2}).Draw(t, "scale"))/int64(rapid.SampledFrom([]int{1, 2}).Draw(t, "shrink")))
		if rapid.Bool().Draw(t, "refuse") {
			a.OnSpent = throttle.OnSpentRefuse
		}
		if !seen[a.Key()] {
			seen[a.Key()] = true
			l.Allowances = append(l.Allowances, a)
		}
	}
	if l.WithDefaults().Validate() != nil {
		l.MaxConcurrent = 2
	}
	return l
}

func (r *run) upsert(l throttle.Limit) {
	if err := r.reps[0].q.UpsertLimits(r.ctx, l); err != nil {
		r.fail("upsert %q: %v", l.Key, err)
	}
	r.m.Configure(l, r.now())
}

// renew renews the leases of the live replicas.
func (r *run) renew() {
	for _, rep := range r.reps {
		if rep.alive {
			if _, err := rep.q.RenewLease(r.ctx, rep.id, leaseTTL); err != nil {
				r.fail("renew lease of %s: %v", rep.id, err)
			}
		}
	}
}

// ops are the operations a step draws from, each as often as it appears.
var ops = []string{
	"enqueue", "enqueue", "enqueue", "enqueue",
	"claim", "claim", "claim", "claim", "claim",
	"take", "take",
	"complete", "complete", "complete", "complete",
	"cancel", "requeue429",
	"tick", "tick", "tick", "tick",
	"change", "change", "resize",
	"pause", "resume",
	"kill", "handback",
	"deliver", "retry",
	"prune",
}

func (r *run) step() {
	op := rapid.SampledFrom(ops).Draw(r.t, "op")
	global.add(op)
	switch op {
	case "enqueue":
		r.enqueue()
	case "claim":
		r.claim(r.live(), rapid.IntRange(1, 6).Draw(r.t, "max"), rapid.SampledFrom([]int{1, 2, 256}).Draw(r.t, "max_lines"))
	case "take":
		r.take(r.live())
	case "complete":
		r.complete()
	case "cancel":
		r.cancel()
	case "requeue429":
		r.requeue()
	case "tick":
		r.tick()
	case "change":
		key := rapid.SampledFrom(allKeys).Draw(r.t, "key")
		r.upsert(r.drawLimit(key))
	case "resize":
		r.resize()
	case "pause":
		key := rapid.SampledFrom(allKeys).Draw(r.t, "key")
		until := r.now().Add(rapid.SampledFrom([]time.Duration{time.Second, time.Minute, time.Hour}).Draw(r.t, "pause_for"))
		if err := r.reps[0].q.Pause(r.ctx, key, until); err != nil {
			r.fail("pause: %v", err)
		}
		r.m.Pause(key, until)
	case "resume":
		key := rapid.SampledFrom(allKeys).Draw(r.t, "key")
		if err := r.reps[0].q.Resume(r.ctx, key); err != nil {
			r.fail("resume: %v", err)
		}
		r.m.Resume(key)
	case "kill":
		r.kill()
	case "handback":
		r.handBack(r.live())
	case "deliver":
		r.deliver(r.live())
	case "retry":
		r.retry()
	case "prune":
		r.prune()
	}
}

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
	n := rapid.IntRange(1, 3).Draw(r.t, "tickets")
	ps := make([]pgqueue.EnqueueParams, n)
	ts := make([]*sim.Ticket, n)
	for i := range ps {
		ps[i], ts[i] = r.drawTicket(rep)
	}
	written, err := rep.q.EnqueueMany(r.ctx, ps)
	if err != nil {
		r.fail("enqueue: %v", err)
	}
	for i, w := range written {
		r.add(ts[i], w)
	}
}

func (r *run) drawTicket(rep *replica) (pgqueue.EnqueueParams, *sim.Ticket) {
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
	p := pgqueue.EnqueueParams{LimitKeys: keys, Cost: cost, OutputCost: output, CostMoney: money,
		Priority:    rapid.IntRange(0, 1).Draw(t, "priority"),
		FairnessKey: rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "fairness"),
		Owner:       rep.id, Namespace: "ns", WorkflowID: "wf", RunID: "run", ActivityID: act, ActivityType: "Call",
		Attempt: 1, Deadline: deadline, NotBefore: notBefore}
	return p, &sim.Ticket{Owner: rep.id, Keys: keys, Cost: throttle.CostOf(cost, output), Money: money,
		Deadline: deadline, NotBefore: notBefore, Activity: act, Attempt: 1}
}

func (r *run) add(t *sim.Ticket, w pgqueue.Ticket) {
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
	var res pgqueue.ClaimResult
	var err error
	r.folds(func() {
		res, err = rep.q.Claim(r.ctx, pgqueue.ClaimParams{Max: max, MaxLines: maxLines, Owner: rep.id, MinRemaining: r.minRem})
	})
	if err != nil {
		r.fail("claim by %s failed (no fault was injected): %v", rep.id, err)
	}
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
			r.fail("%v", err)
		}
		global.mu.Lock()
		global.admissions++
		global.mu.Unlock()
		if t.Owner == rep.id {
			t.State = sim.Running
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
	if len(res.Admitted) < max && !res.More && maxLines >= len(allKeys) {
		r.checkNothingAdmissible(now)
	}
}

// checkNothingAdmissible fails when a queued ticket that a claim with budget left reached could have
// been admitted: in each line, in line order, every ticket up to the first that its line's own limit
// holds must be held by one of its other limits.
func (r *run) checkNothingAdmissible(now time.Time) {
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
		if blocked[q.line] {
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
	u := r.drawUsage(t)
	money := u.Money
	if money < 0 {
		money = 0
	}
	err := r.replica(t.Owner).q.Complete(r.ctx, pgqueue.CompleteParams{TicketID: t.ID, ActualCost: u.Total, ActualOutput: u.Output,
		ActualMoney: money, OutcomeKind: pgqueue.OutcomeCompleted})
	if err != nil {
		r.fail("complete ticket #%d (id %d): %v", t.Index, t.ID, err)
	}
	if money == 0 {
		u.Money = -1
	}
	r.m.Complete(t, u)
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
	err := r.replica(t.Owner).q.Requeue(r.ctx, pgqueue.RequeueParams{TicketID: t.ID, NotBefore: until, ActualCost: actual,
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
	ts, err := rep.q.HandBack(r.ctx, pgqueue.HandBackParams{Max: 1000})
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
	p := pgqueue.EnqueueParams{LimitKeys: old.Keys, Cost: old.Cost.Total(), OutputCost: old.Cost.Output, CostMoney: old.Money,
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
	if _, err := r.live().q.Prune(r.ctx, pgqueue.PruneParams{}); err != nil {
		r.fail("prune: %v", err)
	}
	for _, t := range r.m.Tickets {
		if t.State == sim.Returned && t.FinishedAt.Before(r.now().Add(-time.Hour)) {
			t.State = sim.Gone
		}
	}
}

// check runs after every step: the engine's own Verify, and the tables against the model.
func (r *run) check() {
	problems, err := r.reps[0].q.Verify(r.ctx)
	if err != nil {
		r.fail("verify: %v", err)
	}
	for _, p := range problems {
		r.fail("verify: %s", p)
	}
	r.checkTickets()
	r.checkRows()
}

// checkTickets holds every ticket's state in Postgres against the model's.
func (r *run) checkTickets() {
	rows, err := r.env.admin.Query(r.ctx, `SELECT id, state FROM `+pgx.Identifier{r.env.schema}.Sanitize()+`.sluice_ticket`)
	if err != nil {
		r.fail("read tickets: %v", err)
	}
	type row struct {
		id    int64
		state string
	}
	got, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		return x, cr.Scan(&x.id, &x.state)
	})
	if err != nil {
		r.fail("read tickets: %v", err)
	}
	seen := map[int64]bool{}
	for _, x := range got {
		seen[x.id] = true
		t := r.ticket(x.id)
		if string(t.State) != x.state {
			r.fail("ticket #%d (id %d) is %s in Postgres, %s in the model", t.Index, t.ID, x.state, t.State)
		}
	}
	for _, t := range r.m.Tickets {
		if t.State != sim.Gone && !seen[t.ID] {
			r.fail("ticket #%d (id %d) is %s in the model, gone from Postgres", t.Index, t.ID, t.State)
		}
	}
}

// checkRows holds every limit row's state (buckets, in-flight figures, pause) against the model's,
// which folds what the engine folded, when it did.
func (r *run) checkRows() {
	rows, err := r.env.admin.Query(r.ctx, `SELECT key, request_level, request_at, token_level, token_at, input_token_level,
		input_token_at, output_token_level, output_token_at, inflight_count, inflight_tokens, paused_until
		FROM `+pgx.Identifier{r.env.schema}.Sanitize()+`.sluice_limit`)
	if err != nil {
		r.fail("read limits: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key    string
			s      throttle.State
			ats    [4]*time.Time
			paused *time.Time
		)
		if err := rows.Scan(&key, &s.Requests.Level, &ats[0], &s.Tokens.Level, &ats[1], &s.InputTokens.Level, &ats[2],
			&s.OutputTokens.Level, &ats[3], &s.InflightCount, &s.InflightTokens, &paused); err != nil {
			r.fail("read limits: %v", err)
		}
		for i, b := range []*throttle.Bucket{&s.Requests, &s.Tokens, &s.InputTokens, &s.OutputTokens} {
			if ats[i] != nil {
				b.At = ats[i].UTC()
			}
		}
		if paused != nil {
			s.PausedUntil = paused.UTC()
		}
		k := r.m.Keys[key]
		want := k.State
		want.Allowances = nil
		for _, p := range []struct {
			name      string
			got, want throttle.Bucket
		}{{"requests", s.Requests, want.Requests}, {"tokens", s.Tokens, want.Tokens},
			{"input tokens", s.InputTokens, want.InputTokens}, {"output tokens", s.OutputTokens, want.OutputTokens}} {
			if !p.got.At.Equal(p.want.At) || !closeTo(p.got.Level, p.want.Level) {
				r.fail("limit %q: %s bucket is %+v in Postgres, %+v in the model", key, p.name, p.got, p.want)
			}
		}
		if s.InflightCount != want.InflightCount || s.InflightTokens != want.InflightTokens {
			r.fail("limit %q: %d in flight with %d tokens in Postgres, %d with %d in the model", key, s.InflightCount,
				s.InflightTokens, want.InflightCount, want.InflightTokens)
		}
		if !s.PausedUntil.Equal(want.PausedUntil) {
			r.fail("limit %q: paused until %s in Postgres, %s in the model", key, s.PausedUntil, want.PausedUntil)
		}
	}
	if err := rows.Err(); err != nil {
		r.fail("read limits: %v", err)
	}
}

func closeTo(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-6*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// drain ends the run: every replica's tickets are handed back or run, windows reset and pauses lift,
// until nothing is left in flight or in line. A ticket that stays queued is a stall.
func (r *run) drain() {
	r.clock.add(leaseTTL + time.Second)
	r.renew()
	r.handBack(r.reps[len(r.reps)-1])
	for round := 0; ; round++ {
		open := 0
		for _, t := range r.m.Tickets {
			if t.State == sim.Queued || t.State == sim.Admitted || t.State == sim.Running {
				open++
			}
		}
		if open == 0 {
			break
		}
		if round == 30 {
			var b strings.Builder
			for _, t := range r.m.Tickets {
				if t.State == sim.Queued || t.State == sim.Admitted || t.State == sim.Running {
					ref, _ := r.m.Check(t, r.now())
					fmt.Fprintf(&b, "\n  #%d id %d %s owner %s keys %v cost %+v money %d deadline %v: held by %q %s",
						t.Index, t.ID, t.State, t.Owner, t.Keys, t.Cost, t.Money, t.Deadline, ref.Key, ref.Reason)
				}
			}
			r.fail("drain: %d tickets still open after %d rounds of claims:%s", open, round, b.String())
		}
		for _, key := range allKeys {
			if err := r.reps[0].q.Resume(r.ctx, key); err != nil {
				r.fail("resume: %v", err)
			}
			r.m.Resume(key)
		}
		r.clock.add(32 * 24 * time.Hour)
		r.renew()
		r.handBack(r.reps[len(r.reps)-1])
		for _, rep := range r.reps {
			if !rep.alive {
				continue
			}
			r.claim(rep, 100, 256)
			r.take(rep)
			for _, t := range r.m.Tickets {
				if t.State == sim.Running && t.Owner == rep.id {
					if err := rep.q.Complete(r.ctx, pgqueue.CompleteParams{TicketID: t.ID, ActualCost: t.Cost.Total(),
						ActualOutput: t.Cost.Output, OutcomeKind: pgqueue.OutcomeCompleted}); err != nil {
						r.fail("drain: complete #%d: %v", t.Index, err)
					}
					r.m.Complete(t, sim.Usage{Total: t.Cost.Total(), Output: t.Cost.Output, Money: -1})
					r.end(t, sim.Finished, "completed")
				}
			}
			r.check()
		}
	}
	for _, t := range r.m.Tickets {
		if t.Ends != 1 {
			r.fail("ticket #%d (id %d) ended %d times", t.Index, t.ID, t.Ends)
		}
	}
}

func flagSet(name, value string) error { return flag.Set(name, value) }

// skip reports whether SIM_SKIP (a comma-separated list) names check: a way to look past a defect the
// simulation found, for the next. "refunds" accepts refusals that ignore pending refunds; "absurd"
// reports no absurd usage.
func skip(check string) bool {
	return slices.Contains(strings.Split(os.Getenv("SIM_SKIP"), ","), check)
}
