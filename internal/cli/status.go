package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/sluicehq/sluice/pgqueue"
)

// statusJSON is one key of `sluice status --json`.
type statusJSON struct {
	Key                string    `json:"key"`
	Queued             int64     `json:"queued"`
	Admitted           int64     `json:"admitted"`
	Running            int64     `json:"running"`
	InflightCount      int       `json:"inflight_count"`
	InflightTokens     int64     `json:"inflight_tokens"`
	Configured         limitJSON `json:"configured"`
	Effective          limitJSON `json:"effective"`
	RequestsLastMinute int64     `json:"requests_last_minute"`
	TokensLastMinute   int64     `json:"tokens_last_minute"`
	// The input and output parts of TokensLastMinute.
	InputTokensLastMinute  int64      `json:"input_tokens_last_minute"`
	OutputTokensLastMinute int64      `json:"output_tokens_last_minute"`
	PausedUntil            *time.Time `json:"paused_until"`
	OldestWaitSeconds      float64    `json:"oldest_wait_s"`
	HeadWaitReason         string     `json:"head_wait_reason"`
	Now                    time.Time  `json:"now"`
}

func runStatus(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("status")
	watch := fs.Duration("watch", 0, "refresh every D (e.g. 2s) until interrupted")
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
		return statusTable(w, st)
	})
}

func statusRows(st []pgqueue.KeyStatus) []statusJSON {
	out := make([]statusJSON, len(st))
	for i, s := range st {
		out[i] = statusJSON{Key: s.Configured.Key, Queued: s.Queued, Admitted: s.Admitted, Running: s.Running,
			InflightCount: s.State.InflightCount, InflightTokens: s.State.InflightTokens, Configured: toJSON(s.Configured),
			Effective: toJSON(s.Effective), RequestsLastMinute: s.RequestsLastMinute, TokensLastMinute: s.TokensLastMinute,
			InputTokensLastMinute: s.InputTokensLastMinute, OutputTokensLastMinute: s.OutputTokensLastMinute,
			OldestWaitSeconds: s.OldestWait().Seconds(), HeadWaitReason: s.HeadWaitReason, Now: s.Now}
		if p := s.State.PausedUntil; p.After(s.Now) {
			out[i].PausedUntil = &p
		}
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Key, s.Queued, s.Admitted, s.Running,
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

// num prints a limit: an integer when it is one, else with up to two decimals.
func num(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
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

// ticketJSON is one ticket of `sluice tickets --json`.
type ticketJSON struct {
	ID            int64      `json:"id"`
	State         string     `json:"state"`
	LimitKeys     []string   `json:"limit_keys"`
	Cost          int64      `json:"cost"`
	Priority      int        `json:"priority"`
	FairnessKey   string     `json:"fairness_key"`
	Namespace     string     `json:"namespace"`
	WorkflowID    string     `json:"workflow_id"`
	RunID         string     `json:"run_id"`
	ActivityID    string     `json:"activity_id"`
	ActivityType  string     `json:"activity_type"`
	Attempt       int        `json:"attempt"`
	Owner         string     `json:"owner"`
	EnqueuedAt    time.Time  `json:"enqueued_at"`
	AdmittedAt    *time.Time `json:"admitted_at"`
	WaitedSeconds float64    `json:"waited_s"`
	WaitReason    string     `json:"wait_reason"`
}

func ticketRow(t pgqueue.Ticket, now time.Time) ticketJSON {
	j := ticketJSON{ID: t.ID, State: string(t.State), LimitKeys: t.LimitKeys, Cost: t.Cost, Priority: t.Priority,
		FairnessKey: t.FairnessKey, Namespace: t.Namespace, WorkflowID: t.WorkflowID, RunID: t.RunID,
		ActivityID: t.ActivityID, ActivityType: t.ActivityType, Attempt: t.Attempt, Owner: t.Owner,
		EnqueuedAt: t.EnqueuedAt, WaitedSeconds: waited(t, now).Seconds(), WaitReason: t.WaitReason}
	if !t.AdmittedAt.IsZero() {
		j.AdmittedAt = &t.AdmittedAt
	}
	return j
}

func runTickets(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("tickets")
	watch := fs.Duration("watch", 0, "refresh every D (e.g. 2s) until interrupted")
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
			out := make([]ticketJSON, len(ts))
			for i, t := range ts {
				out[i] = ticketRow(t, now)
			}
			return writeJSON(w, out)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tWORKFLOW ID\tACTIVITY TYPE\tATTEMPT\tWAITED\tPRIORITY\tFAIRNESS KEY\tWAITS ON")
		for _, t := range ts {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", t.ID, t.State, shown(t.WorkflowID), shown(t.ActivityType),
				t.Attempt, roundDur(waited(t, now)), t.Priority, shown(t.FairnessKey), orDash(waitsOn(t)))
		}
		return tw.Flush()
	})
}

// waitsOn is why a queued ticket waits; a ticket admitted waits on nothing.
func waitsOn(t pgqueue.Ticket) string {
	if t.State != "queued" {
		return ""
	}
	return t.WaitReason
}

// waited is how long t waited for admission: until now while queued.
func waited(t pgqueue.Ticket, now time.Time) time.Duration {
	if t.AdmittedAt.IsZero() {
		return now.Sub(t.EnqueuedAt)
	}
	return t.AdmittedAt.Sub(t.EnqueuedAt)
}

func checkWatch(d time.Duration) error {
	if d < 0 || (d > 0 && d < 100*time.Millisecond) {
		return usageErr("--watch must be at least 100ms, got %v", d)
	}
	return nil
}

// watch writes one frame, or with every > 0 a frame every period until ctx ends: for people, each
// frame clears the screen; with --json, each is one line of JSON.
func (r *runner) watch(ctx context.Context, every time.Duration, frame func(io.Writer) error) error {
	if every == 0 {
		return frame(r.env.Stdout)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var b strings.Builder
		if !r.g.json {
			b.WriteString("\x1b[H\x1b[2J")
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
