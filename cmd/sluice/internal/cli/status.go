package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// statusRow is one key of `sluice status --json`: its pgqueue.KeyStatus, whose JSON fields stand at
// the top of the object, and its oldest wait in seconds, for scripts (jq cannot subtract two RFC 3339
// times with fractions of a second).
type statusRow struct {
	pgqueue.KeyStatus
	OldestWaitSeconds float64 `json:"oldest_wait_s"`
}

func runStatus(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("status")
	watch := durationFlag(fs, "watch", 0, "refresh every D (e.g. 2s) until interrupted")
	keys, err := r.parse(fs, "status", args)
	if err != nil {
		return err
	}
	if err := checkWatch(*watch); err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.printStatus(ctx, keys, *watch)
}

// printStatus prints the status of keys (every key when none), once or every period.
func (r *runner) printStatus(ctx context.Context, keys []string, every time.Duration) error {
	return r.watch(ctx, every, func(w io.Writer) error {
		st, err := r.q.Status(ctx, keys...)
		if err != nil {
			return keyErr(err)
		}
		if r.g.json {
			return writeJSON(w, statusRows(st))
		}
		if err := statusTable(w, st); err != nil {
			return err
		}
		return allowancesTable(w, st)
	})
}

func statusRows(st []pgqueue.KeyStatus) []statusRow {
	out := make([]statusRow, len(st))
	for i, s := range st {
		out[i] = statusRow{KeyStatus: s, OldestWaitSeconds: s.OldestWait().Seconds()}
	}
	return out
}

// statusTable prints one line per key. Rates are per minute, used over the last minute against the
// limit admission applies; "(set N)" follows a limit the provider's headers lowered.
func statusTable(w io.Writer, st []pgqueue.KeyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tQUEUED\tADMITTED\tRUNNING\tCONCURRENCY\tIN-FLIGHT TOKENS\tREQUESTS/MIN\tTOKENS/MIN\tINPUT/MIN\tOUTPUT/MIN\tPAUSED FOR\tOLDEST WAIT\tHEAD WAITS ON")
	for _, s := range st {
		c, e := s.Configured, s.Effective
		paused := "-"
		if s.State.PausedUntil.After(s.Now) {
			paused = roundDur(s.State.PausedUntil.Sub(s.Now))
		}
		wait := "-"
		if !s.OldestQueued.IsZero() {
			wait = roundDur(s.OldestWait())
		}
		queued := strconv.FormatInt(s.Queued, 10)
		if other := s.QueuedDrawing - s.Queued; other > 0 { // a tenant's cap: its tickets wait in a provider's line
			queued += fmt.Sprintf(" (+%d in other lines)", other)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Key, queued, s.Admitted, s.Running,
			used(int64(s.State.InflightCount), float64(e.MaxConcurrent), float64(c.MaxConcurrent)),
			used(s.State.InflightTokens, float64(e.MaxInflightTokens), float64(c.MaxInflightTokens)),
			used(s.RequestsLastMinute, e.RequestsPerMinute(), c.RequestsPerMinute()),
			used(s.TokensLastMinute, e.TokensPerMinute, c.TokensPerMinute),
			used(s.InputTokensLastMinute, e.InputTokensPerMinute, c.InputTokensPerMinute),
			used(s.OutputTokensLastMinute, e.OutputTokensPerMinute, c.OutputTokensPerMinute),
			paused, wait, orDash(s.HeadWaitReason))
	}
	return tw.Flush()
}

// used is "n/limit", "n" when there is no limit, and " (set c)" after a limit lowered from c.
func used(n int64, limit, configured float64) string {
	if limit == 0 {
		return strconv.FormatInt(n, 10)
	}
	s := fmt.Sprintf("%d/%s", n, num(limit))
	if configured != limit {
		s += " (set " + num(configured) + ")"
	}
	return s
}

// num prints a limit as set: an integer when it is one, else with up to two decimals, or three
// significant digits under 1, so that a rate of 0.0001/s never reads as 0 ("no limit").
func num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	if math.Abs(v) < 1 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
}

// roundDur prints d to the second (to the millisecond under a second).
func roundDur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// ticketRow is one ticket of `sluice tickets --json`: the pgqueue.KeyTicket (the ticket, its place and
// what holds it), whose JSON fields stand at the top of the object, and how long it waited for
// admission in seconds (until now while queued).
type ticketRow struct {
	pgqueue.KeyTicket
	WaitedSeconds float64 `json:"waited_s"`
}

func runTickets(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("tickets")
	watch := durationFlag(fs, "watch", 0, "refresh every D (e.g. 2s) until interrupted")
	max := fs.Int("max", 50, "show at most N tickets")
	keys, err := r.parse(fs, "tickets", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("tickets takes one KEY, got %d", len(keys))
	}
	if *max < 1 {
		return usageErr("--max must be >= 1, got %d", *max)
	}
	if err := checkWatch(*watch); err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.watch(ctx, *watch, func(w io.Writer) error {
		ts, now, err := r.q.Tickets(ctx, keys[0], *max)
		if err != nil {
			return keyErr(err)
		}
		if r.g.json {
			out := make([]ticketRow, len(ts))
			for i, t := range ts {
				out[i] = ticketRow{KeyTicket: t, WaitedSeconds: t.Waited(now).Seconds()}
			}
			return writeJSON(w, out)
		}
		return ticketsTable(w, ts, now)
	})
}

// ticketsTable prints one line per ticket: those queued first, with their place among the tickets
// waiting on the key, their reservation and what holds each now.
func ticketsTable(w io.Writer, ts []pgqueue.KeyTicket, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPLACE\tWORKFLOW ID\tACTIVITY TYPE\tATTEMPT\tWAITED\tCOST IN\tCOST OUT\tWAITS FOR\tPRIORITY\tFAIRNESS KEY")
	for _, t := range ts {
		place, c := "-", t.Reserved()
		if t.Place > 0 {
			place = strconv.Itoa(t.Place)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%d\t%s\n", t.ID, t.State, place, shown(t.WorkflowID),
			shown(t.ActivityType), t.Attempt, roundDur(t.Waited(now)), c.Input, c.Output, waitsFor(t), t.Priority, shown(t.FairnessKey))
	}
	return tw.Flush()
}

// waitsFor is what holds a queued ticket, and on which limit: "concurrency of tenant:acme", "ahead"
// (of it in its line, every limit having room); "-" when nothing does or it is not queued.
func waitsFor(t pgqueue.KeyTicket) string {
	switch {
	case t.WaitsFor == throttle.WaitNothing:
		return "-"
	case t.WaitsFor == throttle.WaitAhead, t.WaitsOn == "":
		return t.WaitsFor
	}
	return t.WaitsFor + " of " + t.WaitsOn
}

func checkWatch(d time.Duration) error {
	if d < 0 || (d > 0 && d < 100*time.Millisecond) {
		return usageErr("--watch must be at least 100ms, got %v", d)
	}
	return nil
}

// watch writes one frame, or with every > 0 a frame every period until ctx ends: on a terminal each
// frame clears the screen, into a pipe each follows a blank line; with --json each is one line of JSON.
func (r *runner) watch(ctx context.Context, every time.Duration, frame func(io.Writer) error) error {
	if every == 0 {
		return frame(r.env.Stdout)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var b strings.Builder
		switch {
		case r.g.json: // one line of JSON a frame
		case r.env.Terminal:
			b.WriteString("\x1b[H\x1b[2J")
		default:
			b.WriteString("\n")
		}
		if err := frame(&b); err != nil {
			if ctx.Err() != nil { // interrupted during a refresh: that is how a watch ends
				return nil
			}
			return err
		}
		if _, err := io.WriteString(r.env.Stdout, b.String()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// shown is s for a table: "-" when empty, quoted when it holds what a terminal would act on (escape
// sequences in a workflow ID).
func shown(s string) string {
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return orDash(s)
}
