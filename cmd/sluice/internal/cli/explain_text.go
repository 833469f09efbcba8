package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
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
// draws on one a line, and when it is expected to be admitted; else what became of it. The sentences
// are the dashboard's too (package words).
func explainTicket(w io.Writer, te pgqueue.TicketExplanation) error {
	t, e := te.Ticket, te.Explanation
	where := fmt.Sprintf("%s on %s", t.State, strings.Join(t.LimitKeys, ", "))
	if e != nil {
		where = fmt.Sprintf("queued in %s, place %d", e.Line, e.Place)
	}
	fmt.Fprintf(w, "ticket %d, workflow %s, %s: %s; cost %s tokens\n", t.ID, words.Shown(t.WorkflowID), activity(t), where,
		words.CostText(t.Reserved()))
	if e == nil {
		fmt.Fprintln(w, words.Settled(t))
		return nil
	}
	fmt.Fprintln(w, words.Holds(*e, t))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tROOM\tFIGURES\tAHEAD\tREADY")
	for _, l := range e.Limits {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.Key, words.Room(l), words.Figures(l, words.SpendOf(*e, t), e.Now), words.Ahead(l),
			words.Ready(l, e.Now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "expected admission: "+words.Expected(*e))
	if s := words.Refused(*e, t); s != "" {
		fmt.Fprintln(w, s)
	} else if s := words.Expires(*e, t); s != "" {
		fmt.Fprintln(w, s)
	}
	return nil
}

// activity names ticket t's activity in explain's header: its type, with its ID when it has one, and
// the attempt: "activity Call (attempt 1)", "activity Call (ID 7, attempt 2)".
func activity(t pgqueue.Ticket) string {
	if t.ActivityID == "" {
		return fmt.Sprintf("activity %s (attempt %d)", words.Shown(t.ActivityType), t.Attempt)
	}
	return fmt.Sprintf("activity %s (ID %s, attempt %d)", words.Shown(t.ActivityType), words.Shown(t.ActivityID), t.Attempt)
}
