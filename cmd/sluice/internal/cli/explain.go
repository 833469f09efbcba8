package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pgqueue"
)

// explainRow is one ticket of `sluice explain --json`: the pgqueue.TicketExplanation, whose fields
// (ticket, explanation) stand at the top of the object; how long the ticket waited for admission in
// seconds, as tickets' waited_s (until now while queued); and, while it is queued and the estimate is
// known, the seconds from now to its expected admission (jq cannot subtract two RFC 3339 times with
// fractions of a second).
type explainRow struct {
	pgqueue.TicketExplanation
	WaitedSeconds     float64  `json:"waited_s"`
	ExpectedInSeconds *float64 `json:"expected_in_s,omitempty"`
}

// explainArgs is what explain is asked about: one ticket, or the tickets of a workflow.
type explainArgs struct {
	id   int64
	find pgqueue.TicketQuery // Max is the most explained
}

func runExplain(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("explain")
	watch := durationFlag(fs, "watch", 0, "refresh every D (e.g. 2s) until interrupted")
	var a explainArgs
	fs.StringVar(&a.find.WorkflowID, "workflow", "", "explain the tickets of the workflow with this ID, newest first")
	fs.StringVar(&a.find.ActivityID, "activity", "", "with --workflow: only the tickets of the activity with this ID")
	fs.StringVar(&a.find.Namespace, "namespace", "", "with --workflow: only the workflow in this Temporal namespace")
	max := intFlag(fs, "max", 10, 1, math.MaxInt32, "with --workflow: explain at most N tickets, the newest")
	if err := negativeID(fs, args); err != nil {
		return err
	}
	pos, err := r.parse(fs, "explain", args)
	if err != nil {
		return err
	}
	a.find.Max = int(*max)
	if err := a.check(fs, pos); err != nil {
		return err
	}
	if err := checkWatch(fs, *watch); err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.watch(ctx, *watch, func(w io.Writer) error {
		tes, more, err := r.explain(ctx, a)
		if err != nil {
			return err
		}
		if r.g.json {
			return writeJSON(w, explainRows(tes))
		}
		return explainText(w, tes, more)
	})
}

// negativeID refuses a ticket ID such as -3 in args, which the flag package would read as an unknown
// flag "-3": the message names it as the ID it was meant as. The value of a flag is left alone.
func negativeID(fs *flag.FlagSet, args []string) error {
	for i, a := range args {
		if a == "--" {
			return nil
		}
		digits, ok := strings.CutPrefix(a, "-")
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || (i > 0 && takesValue(fs, args[i-1])) {
			continue
		}
		return badID(a)
	}
	return nil
}

// takesValue reports whether arg is a flag of fs that takes the next argument as its value (a flag
// other than a boolean one, without "=value").
func takesValue(fs *flag.FlagSet, arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok || strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimPrefix(name, "-"))
	if f == nil {
		return false
	}
	b, isBool := f.Value.(interface{ IsBoolFlag() bool })
	return !isBool || !b.IsBoolFlag()
}

func badID(s string) error {
	return usageErr("TICKET_ID must be a ticket's ID, a positive integer (as sluice tickets lists them), got %q", s)
}

// check checks explain's arguments and flags, and reads the ticket ID.
func (a *explainArgs) check(fs *flag.FlagSet, pos []string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range []string{"activity", "namespace", "max"} {
		if set[f] && !set["workflow"] {
			return usageErr("--%s goes with --workflow, which is not given (a TICKET_ID names one ticket)", f)
		}
	}
	switch {
	case len(pos) > 1:
		return usageErr("explain takes one TICKET_ID, got %d: %q", len(pos), pos)
	case len(pos) == 1 && set["workflow"]:
		return usageErr("give a TICKET_ID or --workflow, not both (got %q and --workflow %q)", pos[0], a.find.WorkflowID)
	case len(pos) == 0 && !set["workflow"]:
		return usageErr("explain takes a TICKET_ID or --workflow ID")
	}
	if !set["workflow"] {
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id < 1 {
			return badID(pos[0])
		}
		a.id = id
		return nil
	}
	for _, f := range []struct{ name, v string }{{"workflow", a.find.WorkflowID}, {"activity", a.find.ActivityID}, {"namespace", a.find.Namespace}} {
		if set[f.name] && strings.TrimSpace(f.v) == "" {
			return usageErr("--%s must not be blank, got %q", f.name, f.v)
		}
	}
	return nil
}

// explain explains the ticket of a, or the newest tickets of its workflow; more reports that the
// workflow has tickets beyond those.
func (r *runner) explain(ctx context.Context, a explainArgs) (tes []pgqueue.TicketExplanation, more bool, err error) {
	if a.id != 0 {
		te, err := r.q.Explain(ctx, a.id)
		if errors.Is(err, pgqueue.ErrNotFound) {
			return nil, false, notFoundErr(fmt.Errorf("no ticket %d (a ticket is gone once its outcome is delivered to Temporal)", a.id))
		}
		return []pgqueue.TicketExplanation{te}, false, err
	}
	find := a.find
	find.Max++ // one more, to tell that there are more
	ts, err := r.q.FindTickets(ctx, find)
	if err != nil {
		return nil, false, err
	}
	if more = len(ts) > a.find.Max; more {
		ts = ts[:a.find.Max]
	}
	for _, t := range ts {
		te, err := r.q.Explain(ctx, t.ID)
		if errors.Is(err, pgqueue.ErrNotFound) {
			continue // delivered and deleted since it was found
		}
		if err != nil {
			return nil, false, err
		}
		tes = append(tes, te)
	}
	if len(tes) == 0 {
		return nil, false, notFoundErr(fmt.Errorf("no tickets of %s (a ticket is gone once its outcome is delivered to Temporal)", a.describe()))
	}
	return tes, more, nil
}

// describe names the workflow (and activity, and namespace) of a.
func (a explainArgs) describe() string {
	s := fmt.Sprintf("workflow %q", a.find.WorkflowID)
	if a.find.ActivityID != "" {
		s += fmt.Sprintf(", activity %q", a.find.ActivityID)
	}
	if a.find.Namespace != "" {
		s += fmt.Sprintf(" in namespace %q", a.find.Namespace)
	}
	return s
}

func explainRows(tes []pgqueue.TicketExplanation) []explainRow {
	out := make([]explainRow, len(tes))
	for i, te := range tes {
		t, e := te.Ticket, te.Explanation
		out[i] = explainRow{TicketExplanation: te}
		switch {
		case e != nil:
			out[i].WaitedSeconds = t.Waited(e.Now).Seconds()
			if !e.Estimate.IsZero() {
				in := max(0, e.Estimate.Sub(e.Now).Seconds())
				out[i].ExpectedInSeconds = &in
			}
		case !t.AdmittedAt.IsZero():
			out[i].WaitedSeconds = t.Waited(t.AdmittedAt).Seconds()
		case !t.FinishedAt.IsZero(): // finished, or handed back, without being admitted
			out[i].WaitedSeconds = t.Waited(t.FinishedAt).Seconds()
		}
	}
	return out
}
