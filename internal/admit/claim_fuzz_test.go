package admit_test

import (
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// claimTrace is when modelClaim looked at each candidate it reached: examined when it tested the
// deadline and not-before time, checked when it checked the limits (later, when locking the
// ticket's other limits read the clock again).
type claimTrace struct {
	examined, checked map[int64]time.Time
}

// modelClaim is the claim loop as pgqueue ran it inline before DecideClaim existed, transcribed onto
// maps: DecideClaim must decide exactly as it did, lock for lock and instant for instant. Like the
// SQL it came from, it reads the clock again only when a lock took new rows.
func modelClaim(p admit.ClaimPage) (admit.ClaimDecision, claimTrace, error) {
	d := admit.ClaimDecision{VTime: p.VTime}
	tr := claimTrace{examined: map[int64]time.Time{}, checked: map[int64]time.Time{}}
	locked := maps.Clone(p.Limits)
	if locked == nil {
		locked = map[string]admit.LimitState{}
	}
	failed := maps.Clone(p.Unavailable)
	if failed == nil {
		failed = map[string]bool{}
	}
	now, budget := p.Now, p.Budget
	retryAt := func(t time.Time) {
		if !t.IsZero() && (d.RetryAt.IsZero() || t.Before(d.RetryAt)) {
			d.RetryAt = t
		}
	}
tickets:
	for i, t := range p.Candidates {
		if budget == 0 {
			break
		}
		tr.examined[t.ID] = now
		if !t.Deadline.IsZero() && !now.Add(p.MinRemaining).Before(t.Deadline) {
			d.Expired = append(d.Expired, t.ID)
			continue
		}
		if now.Before(t.NotBefore) {
			retryAt(t.NotBefore)
			continue
		}
		var missing []string
		for _, k := range t.LimitKeys {
			if _, ok := locked[k]; !ok && !failed[k] {
				missing = append(missing, k)
			}
		}
		if len(missing) > 0 {
			var got map[string]admit.LimitState
			if p.Lock != nil {
				var (
					at  time.Time
					err error
				)
				if got, at, err = p.Lock(missing); err != nil {
					d.Now = now
					return d, tr, err
				}
				if len(got) > 0 {
					now = at
				}
			}
			for _, k := range missing {
				if r, ok := got[k]; ok {
					locked[k] = r
				} else if !failed[k] {
					failed[k] = true
					d.Unavailable = append(d.Unavailable, k)
				}
			}
		}
		for _, k := range t.LimitKeys {
			if failed[k] {
				d.Busy = true
				continue tickets
			}
		}
		tr.checked[t.ID] = now
		for _, k := range t.LimitKeys {
			r := locked[k]
			dec := r.Limit.Check(r.State, now, t.Cost)
			if dec.OK() {
				continue
			}
			retryAt(dec.RetryAt)
			if k == p.Line {
				d.Blocked = dec.Reason
				for _, w := range p.Candidates[i:] {
					d.Waits = append(d.Waits, admit.Wait{ID: w.ID, Key: k, Reason: dec.Reason})
				}
				break tickets
			}
			d.Waits = append(d.Waits, admit.Wait{ID: t.ID, Key: k, Reason: dec.Reason})
			continue tickets
		}
		if d.States == nil {
			d.States = map[string]throttle.State{}
		}
		for _, k := range t.LimitKeys {
			r := locked[k]
			r.State = r.Limit.Admit(r.State, now, t.Cost)
			locked[k] = r
			d.States[k] = r.State
		}
		d.VTime = max(d.VTime, t.VStart)
		d.Admitted = append(d.Admitted, admit.Admission{ID: t.ID, At: now})
		budget--
	}
	d.Now = now
	return d, tr, nil
}

var errFuzzLock = errors.New("fuzz: lock failed")

// fuzzLock is a LockFunc as pgqueue's: it grants the limits in grant, refuses the others (held by
// another claimer), and returns a later instant (the clock read again) only when it granted one.
// Two fuzzLocks built alike answer alike.
type fuzzLock struct {
	r       *rand.Rand
	grant   map[string]admit.LimitState
	at      time.Time
	failAt  int // the call that fails; 0 for none
	calls   int
	granted map[string]admit.LimitState
}

func newFuzzLock(seed uint64, grant map[string]admit.LimitState, at time.Time, failAt int) *fuzzLock {
	return &fuzzLock{r: rand.New(rand.NewPCG(seed, 99)), grant: grant, at: at, failAt: failAt, granted: map[string]admit.LimitState{}}
}

func (f *fuzzLock) lock(keys []string) (map[string]admit.LimitState, time.Time, error) {
	f.calls++
	if f.calls == f.failAt {
		return nil, time.Time{}, errFuzzLock
	}
	got := map[string]admit.LimitState{}
	for _, k := range keys {
		if ls, ok := f.grant[k]; ok {
			got[k] = ls
			f.granted[k] = ls
		}
	}
	if len(got) == 0 {
		return nil, time.Time{}, nil
	}
	f.at = f.at.Add(time.Duration(f.r.Int64N(int64(3 * time.Second))))
	return got, f.at, nil
}

// randomClaimLimit is a valid limit on key setting a random mix of kinds.
func randomClaimLimit(r *rand.Rand, key string) throttle.Limit {
	for {
		l := throttle.Limit{Key: key}
		if r.IntN(2) == 0 {
			l.MaxConcurrent = 1 + r.IntN(4)
		}
		if r.IntN(3) == 0 {
			l.MaxInflightTokens = 1 + r.Int64N(2000)
		}
		if r.IntN(3) == 0 {
			l.RequestsPerSecond = 0.5 + 20*r.Float64()
			if r.IntN(2) == 0 {
				l.Burst = float64(1 + r.IntN(5))
			}
		}
		if r.IntN(3) == 0 {
			l.TokensPerMinute = 60 + 60_000*r.Float64()
			if r.IntN(2) == 0 {
				l.TokenBurst = float64(1 + r.IntN(3000))
			}
		}
		if l = l.WithDefaults(); l.Validate() == nil {
			return l
		}
	}
}

// randomClaimState is a state l may be in at now: buckets part spent or in debt, tickets in flight
// (possibly more than l allows: admitted before l was lowered), maybe a pause.
func randomClaimState(r *rand.Rand, l throttle.Limit, now time.Time) throttle.State {
	var s throttle.State
	ago := func() time.Time { return now.Add(-time.Duration(r.Int64N(int64(3 * time.Second)))) }
	if r.IntN(4) > 0 {
		s.Requests = throttle.Bucket{Level: math.Min(l.Burst, l.Burst*(2*r.Float64()-0.5)), At: ago()}
	}
	if r.IntN(4) > 0 {
		s.Tokens = throttle.Bucket{Level: math.Min(l.TokenBurst, l.TokenBurst*(2*r.Float64()-0.5)), At: ago()}
	}
	s.InflightCount = r.IntN(5)
	s.InflightTokens = r.Int64N(2500)
	if r.IntN(5) == 0 {
		s.PausedUntil = now.Add(time.Duration(r.Int64N(int64(4*time.Second))) - time.Second)
	}
	return s
}

// randomCandidates is n tickets of line, each drawing on some of others too, in line order.
func randomCandidates(r *rand.Rand, line string, others []string, n int, firstID int64, now time.Time) []admit.Candidate {
	cands := make([]admit.Candidate, n)
	vstart := 0.0
	for i := range cands {
		keys := []string{line}
		for _, j := range r.Perm(len(others)) {
			if r.IntN(3) == 0 {
				keys = append(keys, others[j])
			}
		}
		c := admit.Candidate{ID: firstID + int64(i), LimitKeys: keys, Cost: r.Int64N(1500), VStart: vstart}
		vstart = math.Max(0, vstart+4*r.Float64()-1) // mostly rising; a later priority may start earlier
		if r.IntN(3) == 0 {
			c.Deadline = now.Add(time.Duration(r.Int64N(int64(20*time.Second))) - 5*time.Second)
		}
		if r.IntN(4) == 0 {
			c.NotBefore = now.Add(time.Duration(r.Int64N(int64(6*time.Second))) - 2*time.Second)
		}
		cands[i] = c
	}
	return cands
}

// requireRoom checks that a ticket reserving cost fits ls at at, from the definition of each kind of
// limit rather than through Check.
func requireRoom(t *testing.T, ls admit.LimitState, at time.Time, cost int64, id int64) {
	t.Helper()
	l, s := ls.Limit, ls.Limit.Refill(ls.State, at)
	require.False(t, at.Before(s.PausedUntil), "ticket %d admitted on %q at %v, paused until %v", id, l.Key, at, s.PausedUntil)
	if l.MaxConcurrent > 0 {
		require.Less(t, s.InflightCount, l.MaxConcurrent, "ticket %d admitted past MaxConcurrent of %q", id, l.Key)
	}
	if l.MaxInflightTokens > 0 && s.InflightTokens > 0 {
		require.LessOrEqual(t, s.InflightTokens+cost, l.MaxInflightTokens, "ticket %d admitted past MaxInflightTokens of %q", id, l.Key)
	}
	if l.RequestsPerSecond > 0 {
		require.GreaterOrEqual(t, s.Requests.Level, math.Min(1, l.Burst), "ticket %d admitted past the request bucket of %q", id, l.Key)
	}
	if l.TokensPerMinute > 0 && cost > 0 {
		require.GreaterOrEqual(t, s.Tokens.Level, math.Min(float64(cost), l.TokenBurst), "ticket %d admitted past the token bucket of %q", id, l.Key)
	}
}

// requireSoundDecision checks d, decided on p, against the rules of a claim, walking the candidates
// in line order at the instants tr gives. held are the limits as the claim held them, p's and those
// Lock granted during p; they are brought past d's admissions.
func requireSoundDecision(t *testing.T, p admit.ClaimPage, d admit.ClaimDecision, tr claimTrace, held map[string]admit.LimitState) {
	t.Helper()
	unavailable := maps.Clone(p.Unavailable)
	if unavailable == nil {
		unavailable = map[string]bool{}
	}
	for _, k := range d.Unavailable {
		require.False(t, unavailable[k], "%q found unavailable twice", k)
		require.NotContains(t, p.Limits, k, "a held limit found unavailable")
		unavailable[k] = true
	}
	outcome := map[int64]string{}
	for _, a := range d.Admitted {
		outcome[a.ID] = "admitted"
	}
	for _, id := range d.Expired {
		require.NotContains(t, outcome, id, "ticket %d expired and %s", id, outcome[id])
		outcome[id] = "expired"
	}
	waits := map[int64]admit.Wait{}
	for _, w := range d.Waits {
		require.NotContains(t, outcome, w.ID, "ticket %d waits and is %s", w.ID, outcome[w.ID])
		outcome[w.ID], waits[w.ID] = "waiting", w
	}
	require.LessOrEqual(t, len(d.Admitted), max(p.Budget, 0), "budget")
	require.Len(t, outcome, len(d.Admitted)+len(d.Expired)+len(d.Waits), "a ticket decided twice")
	require.True(t, d.RetryAt.IsZero() || !d.RetryAt.Before(p.Now), "RetryAt %v before now %v", d.RetryAt, p.Now)

	var admitted, expired []int64
	var waiting []admit.Wait
	admittedOn := map[string]bool{}
	blocked, lastAt := -1, p.Now
	for i, c := range p.Candidates {
		if blocked >= 0 {
			require.Equal(t, admit.Wait{ID: c.ID, Key: p.Line, Reason: d.Blocked}, waits[c.ID], "every ticket behind the blocked head waits for the line")
			waiting = append(waiting, waits[c.ID])
			continue
		}
		at, reached := tr.examined[c.ID]
		if !reached {
			require.Empty(t, outcome[c.ID], "ticket %d decided but not reached", c.ID)
			require.Len(t, d.Admitted, p.Budget, "ticket %d not reached with budget left", c.ID)
			continue
		}
		alive := c.Deadline.IsZero() || at.Add(p.MinRemaining).Before(c.Deadline)
		require.Equal(t, !alive, outcome[c.ID] == "expired", "ticket %d, deadline %v, examined at %v", c.ID, c.Deadline, at)
		switch {
		case !alive:
			expired = append(expired, c.ID)
			continue
		case at.Before(c.NotBefore):
			require.Empty(t, outcome[c.ID], "ticket %d decided before its not-before time", c.ID)
			require.False(t, d.RetryAt.IsZero() || d.RetryAt.After(c.NotBefore), "RetryAt %v after not-before %v", d.RetryAt, c.NotBefore)
			continue
		case slices.ContainsFunc(c.LimitKeys, func(k string) bool { return unavailable[k] }):
			require.Empty(t, outcome[c.ID], "ticket %d decided on a limit held elsewhere", c.ID)
			require.True(t, d.Busy, "ticket %d skipped for a limit held elsewhere", c.ID)
			continue
		}
		at = tr.checked[c.ID]
		require.False(t, at.Before(lastAt) || at.After(d.Now), "ticket %d checked at %v, out of [%v, %v]", c.ID, at, lastAt, d.Now)
		lastAt = at
		if outcome[c.ID] != "admitted" {
			// It waits for the first of its limits that refuses it, every one before having room: the
			// line's own limit blocks the line, another passes it over.
			w := waits[c.ID]
			require.Equal(t, "waiting", outcome[c.ID], "ticket %d neither admitted nor waiting", c.ID)
			k := slices.Index(c.LimitKeys, w.Key)
			require.GreaterOrEqual(t, k, 0, "ticket %d waits for %q, not one of its limits", c.ID, w.Key)
			for _, ok := range c.LimitKeys[:k] {
				require.True(t, held[ok].Limit.Check(held[ok].State, at, c.Cost).OK(), "ticket %d waits for %q while %q refuses first", c.ID, w.Key, ok)
			}
			refused := held[w.Key].Limit.Check(held[w.Key].State, at, c.Cost)
			require.Equal(t, w.Reason, refused.Reason, "ticket %d waits for %q", c.ID, w.Key)
			require.True(t, refused.RetryAt.IsZero() || !d.RetryAt.IsZero() && !d.RetryAt.After(refused.RetryAt), "RetryAt %v after %v", d.RetryAt, refused.RetryAt)
			waiting = append(waiting, w)
			if w.Key == p.Line {
				require.Equal(t, d.Blocked, w.Reason, "the head blocks the line")
				blocked = i
			}
			continue
		}
		// Admitted: alive and due when examined (above), never before its not-before time, and with
		// room on every limit at the instant of admission.
		a := d.Admitted[len(admitted)]
		require.Equal(t, admit.Admission{ID: c.ID, At: at}, a, "admissions in line order, at the instant of their check")
		require.False(t, a.At.Before(c.NotBefore), "ticket %d admitted at %v before its not-before %v", a.ID, a.At, c.NotBefore)
		for _, k := range c.LimitKeys {
			require.Contains(t, held, k, "ticket %d admitted on %q, which the claim does not hold", a.ID, k)
			requireRoom(t, held[k], a.At, c.Cost, a.ID)
			ls := held[k]
			ls.State = ls.Limit.Admit(ls.State, a.At, c.Cost)
			held[k] = ls
			admittedOn[k] = true
		}
		admitted = append(admitted, c.ID)
	}
	require.Equal(t, blocked >= 0, d.Blocked != throttle.ReasonNone, "Blocked %v", d.Blocked)
	require.Equal(t, admittedIDs(d), admitted)
	require.Equal(t, d.Expired, expired)
	require.Equal(t, d.Waits, waiting)
	require.Len(t, d.States, len(admittedOn), "States are the limits admitted on")
	for k := range admittedOn {
		require.Equal(t, held[k].State, d.States[k], "state of %q", k)
	}
}

// FuzzDecideClaim runs DecideClaim over a random claim (one or two lines read a page at a time, other
// limits held, held elsewhere or locked lazily, instants moving on at each new lock), feeding each
// decision into the next page as pgqueue does. It checks every decision against the claim loop it
// replaced (modelClaim) and against the rules themselves: no limit admitted past, no expired or
// not-yet ticket admitted, the head-of-line rule, the budget, and the input left untouched.
func FuzzDecideClaim(f *testing.F) {
	for i := range uint64(12) {
		f.Add(i, uint8(4+4*i), uint8(i*7), uint16(i*700), uint8(i))
	}
	for i := range uint64(8) { // budgets smaller than the lines
		f.Add(50+i, uint8(47), uint8(1+i), uint16(0), uint8(i&1))
	}
	// A ticket examined alive whose own lock moves the clock to within MinRemaining of its deadline
	// is admitted all the same: the claim loop tested the deadline before it locked.
	f.Add(uint64(45), uint8('('), uint8('?'), uint16(6300), uint8('\t'))
	f.Add(uint64(100), uint8(47), uint8(63), uint16(0), uint8(0xff))
	f.Add(uint64(101), uint8(0), uint8(0), uint16(65535), uint8(0))

	f.Fuzz(func(t *testing.T, seed uint64, n, budget uint8, minRemainingMs uint16, flags uint8) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		now := t0
		lines := []string{"line:a"}
		if flags&1 != 0 {
			lines = append(lines, "line:b")
		}
		keys := []string{"line:a", "line:b", "x", "y", "z"}
		held := map[string]admit.LimitState{}
		unavailable := map[string]bool{}
		grant := map[string]admit.LimitState{}
		for _, k := range keys {
			l := randomClaimLimit(r, k)
			ls := admit.LimitState{Limit: l, State: randomClaimState(r, l, now)}
			switch {
			case slices.Contains(lines, k): // the claim locked its lines first
				held[k] = ls
			case r.IntN(4) == 0:
				held[k] = ls
			case r.IntN(3) == 0:
				unavailable[k] = true
			case r.IntN(3) > 0:
				grant[k] = ls
			}
		}
		failAt := 0
		if flags&4 != 0 {
			failAt = 1 + r.IntN(3)
		}
		lock, modelLock := newFuzzLock(seed, grant, now, failAt), newFuzzLock(seed, grant, now, failAt)
		vtime := map[string]float64{}
		left := int(budget % 64)
		minRemaining := time.Duration(minRemainingMs%10_000) * time.Millisecond
		var id int64
		for _, line := range lines {
			others := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == line })
			cands := randomCandidates(r, line, others, r.IntN(int(n%48)+1), id, now)
			id += int64(len(cands))
			for len(cands) > 0 && left > 0 {
				size := 1 + r.IntN(len(cands))
				page := admit.ClaimPage{
					Line: line, Candidates: cands[:size], Limits: maps.Clone(held), Unavailable: maps.Clone(unavailable),
					VTime: vtime[line], Now: now, MinRemaining: minRemaining, Budget: left,
				}
				cands = cands[size:]
				model := page
				model.Limits, model.Unavailable = maps.Clone(held), maps.Clone(unavailable)
				if flags&2 == 0 {
					page.Lock, model.Lock = lock.lock, modelLock.lock
				}

				d, err := admit.DecideClaim(page)
				want, trace, wantErr := modelClaim(model)
				require.Equal(t, wantErr, err)
				require.Equal(t, want, d, "DecideClaim departs from the claim loop it replaced")
				require.Equal(t, held, page.Limits, "DecideClaim changed its input")
				require.Equal(t, unavailable, page.Unavailable, "DecideClaim changed its input")
				if err != nil {
					require.ErrorIs(t, err, errFuzzLock)
					return
				}

				for k, ls := range lock.granted {
					if _, ok := held[k]; !ok {
						held[k] = ls
					}
				}
				requireSoundDecision(t, page, d, trace, held)
				for _, k := range d.Unavailable {
					unavailable[k] = true
				}
				vtime[line], now, left = d.VTime, d.Now, left-len(d.Admitted)
				if d.Blocked != throttle.ReasonNone {
					break
				}
			}
		}
		require.GreaterOrEqual(t, left, 0, "budget")
	})
}
