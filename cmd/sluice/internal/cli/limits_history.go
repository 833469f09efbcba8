package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// runLimitsHistory prints who changed a key's limit, when, and from what to what: pgqueue's
// LimitHistory, oldest first.
func runLimitsHistory(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("limits")
	since := durationFlag(fs, "since", 0, "only the changes of the last D (e.g. 24h; default: all the history kept, 90 days)")
	max := intFlag(fs, "max", 50, 1, pgqueue.MaxLimitHistory, "show at most the last N changes")
	keys, err := r.parse(fs, "limits", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("limits history takes one KEY, got %d", len(keys))
	}
	sinceGiven := false
	fs.Visit(func(f *flag.Flag) { sinceGiven = sinceGiven || f.Name == "since" })
	if sinceGiven && *since <= 0 {
		return usageErr("--since must be a positive duration (e.g. 24h), got %v (leave it out for all the history kept)", *since)
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	var from time.Time
	if *since > 0 {
		now, err := r.dbNow(ctx)
		if err != nil {
			return err
		}
		from = now.Add(-*since)
	}
	h, err := r.q.LimitHistory(ctx, keys[0], from, int(*max))
	if err != nil {
		return keyErr(err)
	}
	if r.g.json {
		return writeJSON(r.env.Stdout, h)
	}
	return historyTable(r.env.Stdout, h)
}

// historyTable prints one line per change: when, the kind, who, and each field changed as
// "field: before → after", where none is 0: no limit of that kind, nothing learned, or no limit at
// all before a key was created and after it was deleted. An allowance changed is
// "allowances: before → after", each side in the operators' syntax with what it does when spent, or
// none where it was added or removed.
func historyTable(w io.Writer, h []pgqueue.LimitRecord) error {
	if len(h) == 0 {
		_, err := fmt.Fprintln(w, "no changes recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tWHO\tCHANGES")
	for _, c := range h {
		changes := make([]string, len(c.Changed))
		for i, f := range c.Changed {
			if f.BeforeAllowance != nil || f.AfterAllowance != nil {
				changes[i] = fmt.Sprintf("%s: %s → %s", f.Field, historyAllowance(f.BeforeAllowance), historyAllowance(f.AfterAllowance))
				continue
			}
			changes[i] = fmt.Sprintf("%s: %s → %s", f.Field, setFigure(f.Before), setFigure(f.After))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.At.UTC().Format("2006-01-02 15:04:05 UTC"), c.Kind, words.Shown(c.Who),
			words.OrNone(strings.Join(changes, ", ")))
	}
	return tw.Flush()
}

// setCount is a cap as set, none for 0: not set.
func setCount(n int64) string {
	if n == 0 {
		return none
	}
	return strconv.FormatInt(n, 10)
}

// setFigure is a figure of a limit as num prints it, none for 0: not set (limits get, the history).
func setFigure(v float64) string {
	if v == 0 {
		return none
	}
	return words.Num(v)
}

// historyAllowance is an allowance of the history with what it does when spent,
// "tokens=50000/day (refuse)", or "none" for nil.
func historyAllowance(a *throttle.Allowance) string {
	if a == nil {
		return none
	}
	return fmt.Sprintf("%s (%s)", a, cmp.Or(a.OnSpent, throttle.OnSpentWait))
}

// operator is who runs the command: Env.Operator, else "user@host" from the OS.
func (r *runner) operator() string {
	if r.env.Operator != "" {
		return r.env.Operator
	}
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + cmp.Or(host, "unknown host")
}
