package sim_test

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/sim"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/throttle"
)

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
	r.checkUsage()
	r.checkRunTimes()
}

// eachRow reads the rows of query into dest and calls row after each. A failure to read ends the
// run, naming what was read; the rows are closed however the run ends (a failure is a Goexit, and the
// connection must go back to the pool).
func (r *run) eachRow(what, query string, args, dest []any, row func()) {
	rows, err := r.env.admin.Query(r.ctx, query, args...)
	if err != nil {
		r.fail("read %s: %v", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			r.fail("read %s: %v", what, err)
		}
		row()
	}
	if err := rows.Err(); err != nil {
		r.fail("read %s: %v", what, err)
	}
}

// runAt is a run time recorded for a key: when the run ended (Unix microseconds) and how long it ran
// (milliseconds).
type runAt struct {
	key   string
	ended int64
	ms    int64
}

// ranFor records, as completeSQL does, how long t held each of its limits: from its admission to
// its completion at now, in whole milliseconds (rounded half up).
func (r *run) ranFor(t *sim.Ticket) {
	if t.AdmittedAt.IsZero() {
		return
	}
	ms := min((max(r.now().Sub(t.AdmittedAt).Microseconds(), 0)+500)/1000, math.MaxInt32)
	for _, k := range t.Keys {
		r.runTimes[runAt{k, r.now().UnixMicro(), ms}]++
	}
}

// checkRunTimes holds sluice_run_time against the completions: each completed run's time on each of
// its keys is there once, and nothing else is; rows older than the hour kept may have been pruned.
func (r *run) checkRunTimes() {
	got := map[runAt]int{}
	var at runAt
	var ended time.Time
	r.eachRow("run times", `SELECT key, ended_at, m FROM `+pgx.Identifier{r.env.schema}.Sanitize()+`.sluice_run_time, unnest(run_ms) AS m`,
		nil, []any{&at.key, &ended, &at.ms}, func() {
			at.ended = ended.UnixMicro()
			got[at]++
		})
	kept := r.now().Add(-store.UsageHistory).UnixMicro()
	for at, n := range got {
		if n > r.runTimes[at] {
			r.fail("run time of %q: %d ms ended at %s recorded %d times, %d completions ran so", at.key, at.ms,
				time.UnixMicro(at.ended).UTC().Format(time.RFC3339Nano), n, r.runTimes[at])
		}
	}
	for at, n := range r.runTimes {
		if at.ended >= kept && got[at] != n {
			r.fail("run time of %q: %d ms ended at %s recorded %d times, %d completions ran so", at.key, at.ms,
				time.UnixMicro(at.ended).UTC().Format(time.RFC3339Nano), got[at], n)
		}
	}
}

// usageAt is a key and a second (Unix), a row of sluice_usage.
type usageAt struct {
	key    string
	second int64
}

// drawn is what the admissions of one key in one second drew: requests, tokens, and input tokens.
type drawn struct{ requests, tokens, input int64 }

// checkUsage holds the usage history against the admissions: each row's requests are the admissions
// the model made on its key in its second, and its tokens net of what was given back in that second
// add up to what they reserved (tokens + returned = reserved, of input too). Rows older than the
// history's retention may have been pruned; younger ones must all be there.
func (r *run) checkUsage() {
	seen := map[usageAt]bool{}
	var at usageAt
	var requests, tokens, input, retIn, retOut int64
	r.eachRow("usage", `SELECT key, extract(epoch FROM second)::bigint, requests, tokens, input_tokens, returned_input, returned_output
		FROM `+pgx.Identifier{r.env.schema}.Sanitize()+`.sluice_usage`, nil,
		[]any{&at.key, &at.second, &requests, &tokens, &input, &retIn, &retOut}, func() {
			seen[at] = true
			want := r.drawn[at]
			if requests != want.requests || tokens+retIn+retOut != want.tokens || input+retIn != want.input {
				r.fail("usage of %q at %s: %d requests, %d tokens (%d of input) with %d and %d given back, where the admissions "+
					"drew %d requests and %d tokens (%d of input)", at.key, time.Unix(at.second, 0).UTC().Format(time.RFC3339),
					requests, tokens, input, retIn, retOut, want.requests, want.tokens, want.input)
			}
		})
	kept := r.now().Add(-store.UsageHistory).Unix()
	for at, d := range r.drawn {
		if !seen[at] && at.second > kept && d.requests > 0 {
			r.fail("usage of %q at %s: %d admissions, and no row", at.key, time.Unix(at.second, 0).UTC().Format(time.RFC3339), d.requests)
		}
	}
}

// checkTickets holds every ticket's state in Postgres against the model's, and that every unfinished
// ticket has its holder: the owner the model has, with an owner row whose lease the self-check and
// the hand-back go by.
func (r *run) checkTickets() {
	rows, err := r.env.admin.Query(r.ctx, `SELECT t.id, t.state, t.owner, o.id IS NOT NULL FROM `+
		pgx.Identifier{r.env.schema}.Sanitize()+`.sluice_ticket t LEFT JOIN `+pgx.Identifier{r.env.schema}.Sanitize()+
		`.sluice_owner o ON o.id = t.owner`)
	if err != nil {
		r.fail("read tickets: %v", err)
	}
	defer rows.Close() // a failure below ends the run (Goexit): the connection must go back
	type row struct {
		id           int64
		state, owner string
		ownerRow     bool
	}
	got, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		return x, cr.Scan(&x.id, &x.state, &x.owner, &x.ownerRow)
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
		if unfinished := t.State == sim.Queued || t.State == sim.Admitted || t.State == sim.Running; unfinished &&
			(x.owner != t.Owner || !x.ownerRow) {
			r.fail("%s ticket #%d (id %d) is held by %q in Postgres (owner row: %v), by %s in the model", t.State, t.Index,
				t.ID, x.owner, x.ownerRow, t.Owner)
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
	seen := map[string]bool{}
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
		if k == nil {
			r.fail("limit %q is in Postgres, deleted in the model", key)
		}
		seen[key] = true
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
	for key := range r.m.Keys {
		if !seen[key] {
			r.fail("limit %q is in the model, gone from Postgres", key)
		}
	}
}

func closeTo(a, b float64) bool {
	return a == b || math.Abs(a-b) <= 1e-6*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// drain ends the run: every replica's tickets are handed back or run, windows reset and pauses lift,
// until nothing is left in flight or in line. Rounds in which nothing moves, with tickets open, are a
// stall.
func (r *run) drain() {
	r.clock.add(leaseTTL + time.Second)
	r.renew()
	r.handBack(r.reps[len(r.reps)-1])
	// A round may admit as little as one ticket (a rate with a burst of 1 admits one per claim), so a
	// stall is rounds in a row in which nothing moved: no ticket ended, none was admitted.
	still, lastOpen, lastAdmissions := 0, -1, -1
	for round := 0; ; round++ {
		open, admissions := 0, 0
		for _, t := range r.m.Tickets {
			if t.State == sim.Queued || t.State == sim.Admitted || t.State == sim.Running {
				open++
			}
			if !t.AdmittedAt.IsZero() {
				admissions++
			}
		}
		if open == 0 {
			break
		}
		if open == lastOpen && admissions == lastAdmissions {
			still++
		} else {
			still = 0
		}
		lastOpen, lastAdmissions = open, admissions
		if still == 3 {
			var b strings.Builder
			for _, t := range r.m.Tickets {
				if t.State == sim.Queued || t.State == sim.Admitted || t.State == sim.Running {
					ref, _ := r.m.Check(t, r.now())
					fmt.Fprintf(&b, "\n  #%d id %d %s owner %s keys %v cost %+v money %d deadline %v: held by %q %s",
						t.Index, t.ID, t.State, t.Owner, t.Keys, t.Cost, t.Money, t.Deadline, ref.Key, ref.Reason)
				}
			}
			r.fail("drain: %d tickets still open, nothing moved in the last 3 of %d rounds of claims:%s", open, round, b.String())
		}
		for _, key := range allKeys {
			if r.m.Keys[key] == nil {
				continue // deleted
			}
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
					if err := rep.q.Complete(r.ctx, store.CompleteParams{TicketID: t.ID, ActualCost: t.Cost.Total(),
						ActualOutput: t.Cost.Output, OutcomeKind: store.OutcomeCompleted, Delivered: true}); err != nil {
						r.fail("drain: complete #%d: %v", t.Index, err)
					}
					r.completed(t, sim.Usage{Total: t.Cost.Total(), Output: t.Cost.Output, Money: -1}, true)
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
