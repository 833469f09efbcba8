package cli

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// explainText prints each explanation, a blank line apart, and a last line when the workflow has more
// tickets than those.
func explainText(w io.Writer, tes []pgqueue.TicketExplanation, more bool) error {
	for i, te := range tes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := explainTicket(w, te); err != nil {
			return err
		}
	}
	if more {
		fmt.Fprintf(w, "\nmore of the workflow's tickets are not shown: narrow with --activity, or raise --max (now %d)\n", len(tes))
	}
	return nil
}

// explainTicket prints one ticket: a header; then, while it is queued, what holds it, the limits it
// draws on one a line, and when it is expected to be admitted; else when it was admitted or finished.
func explainTicket(w io.Writer, te pgqueue.TicketExplanation) error {
	t, e := te.Ticket, te.Explanation
	where := fmt.Sprintf("%s on %s", t.State, strings.Join(t.LimitKeys, ", "))
	if e != nil {
		where = fmt.Sprintf("queued in %s, place %d", e.Line, e.Place)
	}
	fmt.Fprintf(w, "ticket %d, workflow %s, activity %s (%s, attempt %d): %s; cost %s tokens\n", t.ID, shown(t.WorkflowID),
		shown(t.ActivityID), shown(t.ActivityType), t.Attempt, where, costText(t.Reserved()))
	if e == nil {
		fmt.Fprintln(w, settled(t))
		return nil
	}
	fmt.Fprintln(w, holds(*e, t))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tROOM\tFIGURES\tAHEAD\tREADY")
	for _, l := range e.Limits {
		room := "yes"
		if !l.Room {
			room = l.Reason
		}
		ahead := grouped(int64(l.Ahead))
		if l.AheadCost != (throttle.Cost{}) {
			ahead += " (" + costText(l.AheadCost) + ")"
		}
		if l.HeldElsewhere > 0 {
			ahead += " +" + grouped(int64(l.HeldElsewhere)) + " held elsewhere"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Key, room, figures(l, spendOf(*e, t), e.Now), ahead, ready(l.ReadyAt, e.Now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, expected(*e))
	if e.Refused != nil {
		fmt.Fprintf(w, "it will be refused: %s; the next claim fails its activity (%s)\n", e.Refused.Error(), refusedWhy(*e.Refused))
	} else if e.Expires {
		fmt.Fprintf(w, "it expires first: its deadline, %s, comes before the expected admission; Temporal is expected to time it out\n",
			until(t.Deadline, e.Now))
	}
	return nil
}

// ready is a limit's estimate for the table.
func ready(at, now time.Time) string {
	switch {
	case at.IsZero():
		return "not known"
	case !at.After(now):
		return "now"
	}
	return in(at, now)
}

// dimension is one kind of limit (concurrency, a bucket) as it stands towards a ticket: its figures
// for the table, the sentence when it holds the ticket, and how near it is to refusing (what the
// ticket needs over what there is: over 1 it refuses), to pick which to show of a limit with room.
type dimension struct {
	reason, figures, why string
	fill                 float64
}

// figures are the figures of limit l for the table: those of the dimension that refuses the ticket,
// or of a limit with room, those of the dimension nearest to refusing.
func figures(l throttle.LimitWait, c throttle.Spend, now time.Time) string {
	if l.Reason == throttle.WaitUnknownLimit {
		return "the limit does not exist"
	}
	return cmp.Or(binding(l, c, now).figures, "no limit set")
}

// binding is the dimension of l that refuses the ticket, or nearest to refusing it.
func binding(l throttle.LimitWait, c throttle.Spend, now time.Time) dimension {
	if !l.Room && l.Spent != nil { // of several allowances, the one that refuses
		a := l.Spent.Allowance
		return allowanceDimension(a, l.Key, l.State.Allowances[a.Key()], c, now)
	}
	ds := dimensions(l, c, now)
	var best dimension
	for i, d := range ds {
		if !l.Room && d.reason == l.Reason {
			return d
		}
		if i == 0 || d.fill > best.fill {
			best = d
		}
	}
	if best.reason == "" {
		best.why = l.Reason + " of " + l.Key
	}
	return best
}

// dimensions are the kinds of limit l sets, in the order a claim checks them, as they stand towards
// a ticket reserving c at now.
func dimensions(l throttle.LimitWait, sp throttle.Spend, now time.Time) []dimension {
	lim, s, key, c := l.Limit, l.State, l.Key, sp.Tokens
	var ds []dimension
	if s.PausedUntil.After(now) {
		ds = append(ds, dimension{throttle.ReasonPaused.String(), "paused until " + clock(s.PausedUntil, now),
			fmt.Sprintf("the pause of %s: paused until %s", key, until(s.PausedUntil, now)), math.Inf(1)})
	}
	if lim.MaxConcurrent > 0 {
		used := fmt.Sprintf("%d/%d", s.InflightCount, lim.MaxConcurrent)
		ds = append(ds, dimension{throttle.ReasonConcurrency.String(), "concurrency " + used,
			fmt.Sprintf("concurrency of %s (%s in flight)", key, used), float64(s.InflightCount+1) / float64(lim.MaxConcurrent)})
	}
	if lim.MaxInflightTokens > 0 {
		used := grouped(s.InflightTokens) + "/" + grouped(lim.MaxInflightTokens)
		ds = append(ds, dimension{throttle.ReasonInflightTokens.String(), fmt.Sprintf("in-flight tokens %s, needs %s", used, grouped(c.Total())),
			fmt.Sprintf("in-flight tokens of %s: needs %s, %s in flight", key, grouped(c.Total()), used),
			float64(s.InflightTokens+c.Total()) / float64(lim.MaxInflightTokens)})
	}
	if lim.RequestsPerSecond > 0 {
		ds = append(ds, bucketDimension(throttle.ReasonRate, "requests", key, s.Requests, 1, lim.RequestsPerSecond, lim.Burst))
	}
	for _, b := range []struct {
		reason           throttle.Reason
		label            string
		perMinute, burst float64
		bucket           throttle.Bucket
		n                int64
	}{
		{throttle.ReasonTokens, "tokens", lim.TokensPerMinute, lim.TokenBurst, s.Tokens, c.Total()},
		{throttle.ReasonInputTokens, "input tokens", lim.InputTokensPerMinute, lim.InputTokenBurst, s.InputTokens, c.Input},
		{throttle.ReasonOutputTokens, "output tokens", lim.OutputTokensPerMinute, lim.OutputTokenBurst, s.OutputTokens, c.Output},
	} {
		if b.perMinute > 0 {
			ds = append(ds, bucketDimension(b.reason, b.label, key, b.bucket, float64(b.n), b.perMinute/60, b.burst))
		}
	}
	for _, a := range lim.Allowances {
		ds = append(ds, allowanceDimension(a, key, s.Allowances[a.Key()], sp, now))
	}
	return ds
}

// bucketDimension is a bucket refilled at rate a second up to burst, of which a ticket takes n: it
// needs n in the bucket, or a full bucket when n is more than the burst (see throttle.Bucket).
func bucketDimension(r throttle.Reason, label, key string, b throttle.Bucket, n, rate, burst float64) dimension {
	need := math.Min(n, burst)
	needs := figure(need)
	if n > burst {
		needs = fmt.Sprintf("a full bucket of %s (its %s are more than the burst)", figure(burst), figure(n))
	}
	fill := 0.0
	switch {
	case need <= 0:
	case b.Level <= 0:
		fill = math.Inf(1)
	default:
		fill = need / b.Level
	}
	return dimension{r.String(), fmt.Sprintf("%s: has %s, needs %s, +%s/s", label, figure(b.Level), needs, figure(rate)),
		fmt.Sprintf("%s of %s: needs %s, has %s, refills %s/s", label, key, needs, figure(b.Level), figure(rate)), fill}
}

// costText is a reservation by dimension: "40,000 in + 500 out".
func costText(c throttle.Cost) string {
	return grouped(c.Input) + " in + " + grouped(c.Output) + " out"
}

func ticketCount(n int) string {
	if n == 1 {
		return "1 ticket"
	}
	return grouped(int64(n)) + " tickets"
}

// figure is a figure of a bucket as people read it: grouped by thousands, whole from 100 (rounded
// down, so that a level just short of what is needed never reads as enough), else as set (num).
func figure(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return grouped(int64(math.Floor(v)))
	}
	return num(v)
}

// grouped is n with its thousands apart: 40,000.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)])
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// in is an instant after now as "in 30s (at 12:00:30 UTC)".
func in(t, now time.Time) string {
	return fmt.Sprintf("%s (at %s)", relative(t, now), clock(t, now))
}

// until is an instant as "12:00:30 UTC (in 30s)", or "(5s ago)" when it is past.
func until(t, now time.Time) string {
	return fmt.Sprintf("%s (%s)", clock(t, now), relative(t, now))
}

func relative(t, now time.Time) string {
	if d := t.Sub(now); d >= 0 {
		return "in " + roundDur(d)
	}
	return roundDur(now.Sub(t)) + " ago"
}

// clock is instant t in UTC: its time of day on the day of now, else with its date.
func clock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05 UTC")
	}
	return stamp(t)
}

// stamp is instant t in UTC, with its date, as the command prints instants.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }
