package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
)

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
	max := intFlag(fs, "max", 50, 1, math.MaxInt32, "show at most N tickets")
	keys, err := r.parse(fs, "tickets", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("tickets takes one KEY, got %d", len(keys))
	}
	if err := checkWatch(fs, *watch); err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.watch(ctx, *watch, func(w io.Writer) error {
		ts, now, err := r.q.Tickets(ctx, keys[0], int(*max))
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
		place, c := none, t.Reserved()
		if t.Place > 0 {
			place = strconv.Itoa(t.Place)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%d\t%s\n", t.ID, t.State, place, words.Shown(t.WorkflowID),
			words.Shown(t.ActivityType), t.Attempt, words.RoundDur(t.Waited(now)), c.Input, c.Output, waitsFor(t), t.Priority, words.Shown(t.FairnessKey))
	}
	return tw.Flush()
}

// waitsFor is what holds a queued ticket, in explain's words: "concurrency of tenant:acme", "tickets
// ahead in openai"; none when nothing does or it is not queued.
func waitsFor(t pgqueue.KeyTicket) string { return words.WaitWords(t.WaitsFor, t.WaitsOn) }
