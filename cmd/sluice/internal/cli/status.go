package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
)

// statusRow is one key of `sluice status --json`: its pgqueue.KeyStatus, whose JSON fields stand at
// the top of the object, and its oldest wait in seconds, for scripts (jq cannot subtract two RFC 3339
// times with fractions of a second).
type statusRow struct {
	pgqueue.KeyStatus
	OldestWaitSeconds float64 `json:"oldest_wait_s"`
}

// DefaultStatusLimit is how many keys sluice status shows without KEYs or --limit: a screenful or a
// few, not the 10,000 lines of a schema of 10,000 keys.
const DefaultStatusLimit = 200

// statusQuery is what status is asked about: keys by name, or else the first limit keys of a prefix.
type statusQuery struct {
	keys   []string
	prefix string
	limit  int
}

func runStatus(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("status")
	watch := durationFlag(fs, "watch", 0, "refresh every D (e.g. 2s) until interrupted")
	var sq statusQuery
	fs.StringVar(&sq.prefix, "prefix", "", "without KEYs: only the keys that start with P (e.g. tenant:)")
	limit := intFlag(fs, "limit", DefaultStatusLimit, 1, math.MaxInt32, "without KEYs: show at most the first N keys, in key order; a last line says how many more there are")
	keys, err := r.parse(fs, "status", args)
	if err != nil {
		return err
	}
	sq.keys, sq.limit = keys, int(*limit)
	if len(keys) > 0 && given(fs, "prefix") {
		return usageErr("status takes KEYs or --prefix, not both: got %q and --prefix %q", keys, sq.prefix)
	}
	if err := checkWatch(fs, *watch); err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.printStatus(ctx, sq, *watch)
}

// printStatus prints the status of the keys sq asks for, once or every period. A key that does not
// exist ends it with an error naming it, after the status of those that do.
func (r *runner) printStatus(ctx context.Context, sq statusQuery, every time.Duration) error {
	return r.watch(ctx, every, func(w io.Writer) error {
		st, total, err := r.readStatus(ctx, sq)
		if err != nil && !isUnknown(err) {
			return err
		}
		if r.g.json {
			if werr := writeJSON(w, statusRows(st)); werr != nil {
				return werr
			}
			if more := total - int64(len(st)); more > 0 {
				_ = writeJSON(r.env.Stderr, struct {
					Warning string `json:"warning"`
					Shown   int    `json:"shown"`
					Total   int64  `json:"total"`
				}{notShown(len(st), total), len(st), total})
			}
			return keyErr(err)
		}
		if len(st) > 0 || err == nil {
			if terr := statusTable(w, st); terr != nil {
				return terr
			}
			if aerr := allowancesTable(w, st); aerr != nil {
				return aerr
			}
		}
		if more := total - int64(len(st)); more > 0 {
			fmt.Fprintln(w, notShown(len(st), total))
		}
		return keyErr(err)
	})
}

// readStatus reads the keys of sq by name (total is then how many were found), or the first page of
// its prefix and how many keys the prefix has.
func (r *runner) readStatus(ctx context.Context, sq statusQuery) (st []pgqueue.KeyStatus, total int64, err error) {
	if len(sq.keys) > 0 {
		st, err = r.q.Status(ctx, sq.keys...)
		return st, int64(len(st)), err
	}
	page, err := r.q.StatusPage(ctx, pgqueue.StatusParams{Prefix: sq.prefix, Limit: sq.limit})
	return page.Keys, page.Total, err
}

// notShown is the line under a status cut at --limit: how many keys were left out, and how to see them.
func notShown(shown int, total int64) string {
	more, keys := total-int64(shown), "keys"
	if more == 1 {
		keys = "key"
	}
	return fmt.Sprintf("%s more %s not shown (%s of %s): name the keys, narrow with --prefix, or show them all with --limit %d",
		words.Grouped(more), keys, words.Grouped(int64(shown)), words.Grouped(total), total)
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
		paused := none
		if s.State.PausedUntil.After(s.Now) {
			paused = words.RoundDur(s.State.PausedUntil.Sub(s.Now))
		}
		wait := none
		if !s.OldestQueued.IsZero() {
			wait = words.RoundDur(s.OldestWait())
		}
		queued := strconv.FormatInt(s.Queued, 10)
		if other := s.QueuedDrawing - s.Queued; other > 0 { // a tenant's cap: its tickets wait in a provider's line
			queued += fmt.Sprintf(" (+%d in other lines)", other)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Key, queued, s.Admitted, s.Running,
			usedOf(int64(s.State.InflightCount), int64(e.MaxConcurrent), int64(c.MaxConcurrent)),
			usedOf(s.State.InflightTokens, e.MaxInflightTokens, c.MaxInflightTokens),
			used(s.RequestsLastMinute, e.RequestsPerMinute(), c.RequestsPerMinute()),
			used(s.TokensLastMinute, e.TokensPerMinute, c.TokensPerMinute),
			used(s.InputTokensLastMinute, e.InputTokensPerMinute, c.InputTokensPerMinute),
			used(s.OutputTokensLastMinute, e.OutputTokensPerMinute, c.OutputTokensPerMinute),
			paused, wait, headWaits(s))
	}
	return tw.Flush()
}

// headWaits is why the line's head last waited, in explain's words: "concurrency of tenant:acme",
// "the pause of openai"; none when nothing waits or no claim looked at it.
func headWaits(s pgqueue.KeyStatus) string {
	if s.HeadWaitReason == "" {
		return none
	}
	reason, key, ok := strings.Cut(s.HeadWaitReason, " of ")
	if !ok {
		key = s.Configured.Key
	}
	return words.WaitWords(reason, key)
}

// used is "n/limit", "n" when there is no limit, and " (set c)" after a limit lowered from c.
func used(n int64, limit, configured float64) string {
	if limit == 0 {
		return strconv.FormatInt(n, 10)
	}
	s := fmt.Sprintf("%d/%s", n, words.Num(limit))
	if configured != limit {
		s += " (set " + words.Num(configured) + ")"
	}
	return s
}

// usedOf is used for a cap, a whole number that a float64 may not hold exactly (an int64's).
func usedOf(n, limit, configured int64) string {
	if limit == 0 {
		return strconv.FormatInt(n, 10)
	}
	s := fmt.Sprintf("%d/%d", n, limit)
	if configured != limit {
		s += fmt.Sprintf(" (set %d)", configured)
	}
	return s
}
