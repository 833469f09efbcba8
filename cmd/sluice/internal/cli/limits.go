package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/words"
	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// limitFlagNames names throttle.Limit's fields, which its validation names, as the flags of limits
// set that set them; the longer names first, as the replacer tries them in order.
var limitFlagNames = strings.NewReplacer(
	"InputTokensPerMinute", "--itpm", "OutputTokensPerMinute", "--otpm", "InputTokenBurst", "--input-token-burst",
	"OutputTokenBurst", "--output-token-burst", "MaxInflightTokens", "--max-inflight-tokens", "TokensPerMinute", "--tpm",
	"TokenBurst", "--token-burst", "RequestsPerSecond", "--rps", "MaxConcurrent", "--max-concurrent", "Burst", "--burst",
	"Allowances", "--allowance", "OnSpent", "--on-spent")

// inFlagNames is msg, a limit's validation error, with the fields it names after the quoted key
// written as flags (the key itself is left as it is, whatever it spells).
func inFlagNames(msg, key string) string {
	q := strconv.Quote(key)
	i := strings.Index(msg, q)
	if i < 0 {
		return limitFlagNames.Replace(msg)
	}
	return msg[:i+len(q)] + limitFlagNames.Replace(msg[i+len(q):])
}

func isUnknown(err error) bool { return errors.Is(err, pgqueue.ErrUnknownLimit) }

func runLimits(ctx context.Context, r *runner, args []string) error {
	if len(args) == 0 || (args[0] != "get" && args[0] != "set" && args[0] != "history" && args[0] != "delete") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			r.commandUsage(r.flagSet("limits"), "limits")
			return flag.ErrHelp
		}
		return usageErr("limits takes get, set, history or delete, got %q", args)
	}
	switch args[0] {
	case "get":
		return runLimitsGet(ctx, r, args[1:])
	case "history":
		return runLimitsHistory(ctx, r, args[1:])
	case "delete":
		return runLimitsDelete(ctx, r, args[1:])
	}
	return runLimitsSet(ctx, r, args[1:])
}

func runLimitsGet(ctx context.Context, r *runner, args []string) error {
	keys, err := r.parse(r.flagSet("limits"), "limits", args)
	if err != nil {
		return err
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	return r.printLimits(ctx, keys)
}

// printLimits prints the limits of keys (every key when none). A key that does not exist ends it
// with an error naming it, after the limits of those that do.
func (r *runner) printLimits(ctx context.Context, keys []string) error {
	st, err := r.q.Status(ctx, keys...)
	if err != nil && !isUnknown(err) {
		return err
	}
	if r.g.json {
		out := make([]pgqueue.LimitStatus, len(st))
		for i, s := range st {
			out[i] = s.LimitStatus
		}
		if werr := writeJSON(r.env.Stdout, out); werr != nil {
			return werr
		}
		return keyErr(err)
	}
	if len(st) > 0 || err == nil {
		if terr := limitsTable(r.env.Stdout, st); terr != nil {
			return terr
		}
		if aerr := allowancesTable(r.env.Stdout, st); aerr != nil {
			return aerr
		}
	}
	return keyErr(err)
}

func limitsTable(w io.Writer, st []pgqueue.KeyStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMAX CONCURRENT\tREQUESTS/S\tBURST\tTOKENS/MIN\tTOKEN BURST\tINPUT/MIN\tINPUT BURST\tOUTPUT/MIN\tOUTPUT BURST\tMAX IN-FLIGHT TOKENS\tLEARNED")
	for _, s := range st {
		c, e := s.Configured, s.Effective
		learned := none
		if !e.Equal(c) {
			learned = fmt.Sprintf("%s/s burst %s, %s tokens/min burst %s, %s input/min burst %s, %s output/min burst %s",
				words.Num(e.RequestsPerSecond), words.Num(e.Burst), words.Num(e.TokensPerMinute), words.Num(e.TokenBurst),
				words.Num(e.InputTokensPerMinute), words.Num(e.InputTokenBurst), words.Num(e.OutputTokensPerMinute), words.Num(e.OutputTokenBurst))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Key, setCount(int64(c.MaxConcurrent)), setFigure(c.RequestsPerSecond),
			setFigure(c.Burst), setFigure(c.TokensPerMinute), setFigure(c.TokenBurst), setFigure(c.InputTokensPerMinute), setFigure(c.InputTokenBurst),
			setFigure(c.OutputTokensPerMinute), setFigure(c.OutputTokenBurst), setCount(c.MaxInflightTokens), learned)
	}
	return tw.Flush()
}

// limitFlags are the flags of limits set: each records whether it was given.
type limitFlags struct {
	set        map[string]bool
	ints       map[string]*int64
	floats     map[string]*float64
	allowances throttle.Allowances
	// none records --allowance none, which may not come with another --allowance, in either order.
	none    bool
	onSpent throttle.OnSpent
}

func newLimitFlags(fs *flag.FlagSet) *limitFlags {
	lf := &limitFlags{set: map[string]bool{}, ints: map[string]*int64{}, floats: map[string]*float64{}}
	// The bounds are the engine's: throttle.Limit's MaxConcurrent is an int held in an integer column,
	// at most math.MaxInt32; MaxInflightTokens an int64 in a bigint column.
	for _, f := range []struct {
		name, help string
		max        int64
	}{
		{"max-concurrent", "tickets admitted and still running (0: no cap)", math.MaxInt32},
		{"max-inflight-tokens", "tokens reserved by running tickets (0: no cap)", math.MaxInt64},
	} {
		lf.ints[f.name] = intFlag(fs, f.name, 0, 0, f.max, f.help)
	}
	for _, f := range []struct{ name, help string }{
		{"rps", "requests per second (0: none); a new rate without --burst puts the burst back to its default"},
		{"burst", "requests at once after an idle spell"},
		{"tpm", "tokens per minute (0: none); a new rate without --token-burst puts the burst back to its default"},
		{"token-burst", "tokens at once after an idle spell"},
		{"itpm", "input tokens per minute (Anthropic's ITPM; 0: none); a new rate without --input-token-burst puts the burst back to its default"},
		{"input-token-burst", "input tokens at once after an idle spell"},
		{"otpm", "output tokens per minute (Anthropic's OTPM; 0: none); a new rate without --output-token-burst puts the burst back to its default"},
		{"output-token-burst", "output tokens at once after an idle spell"},
	} {
		v := new(float64)
		lf.floats[f.name] = v
		fs.Func(f.name, f.help, func(s string) error {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > throttle.MaxRate {
				return fmt.Errorf("must be a number from 0 to %s, got %q", strconv.FormatFloat(throttle.MaxRate, 'f', -1, 64), s)
			}
			if x == 0 && strings.HasSuffix(f.name, "burst") {
				// To throttle a burst of 0 is "the default": refused here rather than quietly replaced.
				return fmt.Errorf("must be >= 1, got %q (leave it out to keep the burst; a changed rate without it gets its default back)", s)
			}
			*v, lf.set[f.name] = x, true
			return nil
		})
	}
	fs.Func("allowance", "a windowed allowance, METER=AMOUNT/PERIOD[@ZONE] (tokens=5000000/day@America/Los_Angeles, "+
		"usd=5.00/month, requests=1000/24h); repeat for several: they replace the limit's; none, alone, removes them all. "+
		"Without --on-spent each keeps what the key's allowance of its meter and period did when spent; a new one refuses if all the key's refuse, else waits", func(s string) error {
		lf.set["allowance"] = true
		if strings.TrimSpace(s) == "none" {
			lf.none = true
			return nil
		}
		a, err := throttle.ParseAllowance(s)
		if err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "throttle: "))
		}
		lf.allowances = append(lf.allowances, a)
		return nil
	})
	fs.Func("on-spent", "what a ticket does when an allowance is spent: wait (for the reset) or refuse (fail the activity at once); sets it for all the key's allowances", func(s string) error {
		switch o := throttle.OnSpent(s); o {
		case throttle.OnSpentWait, throttle.OnSpentRefuse:
			lf.onSpent, lf.set["on-spent"] = o, true
			return nil
		}
		return fmt.Errorf("must be wait or refuse, got %q", s)
	})
	return lf
}

// change is the change the flags given ask for.
func (lf *limitFlags) change() throttle.LimitChange {
	var c throttle.LimitChange
	if lf.set["max-concurrent"] {
		n := int(*lf.ints["max-concurrent"])
		c.MaxConcurrent = &n
	}
	if lf.set["max-inflight-tokens"] {
		c.MaxInflightTokens = lf.ints["max-inflight-tokens"]
	}
	for name, dst := range map[string]**float64{"rps": &c.RequestsPerSecond, "burst": &c.Burst, "tpm": &c.TokensPerMinute,
		"token-burst": &c.TokenBurst, "itpm": &c.InputTokensPerMinute, "input-token-burst": &c.InputTokenBurst,
		"otpm": &c.OutputTokensPerMinute, "output-token-burst": &c.OutputTokenBurst} {
		if lf.set[name] {
			*dst = lf.floats[name]
		}
	}
	if lf.set["allowance"] {
		c.Allowances = &lf.allowances // none alone leaves it empty: no allowances
	}
	if lf.set["on-spent"] {
		c.OnSpent = &lf.onSpent
	}
	return c
}

func runLimitsSet(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("limits")
	lf := newLimitFlags(fs)
	create := fs.Bool("create", false, "create KEY when it does not exist")
	keys, err := r.parse(fs, "limits", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("limits set takes one KEY, got %d", len(keys))
	}
	if lf.none && len(lf.allowances) > 0 {
		specs := make([]string, len(lf.allowances))
		for i, a := range lf.allowances {
			specs[i] = a.String()
		}
		return usageErr("limits set %s: --allowance none removes every allowance, so it cannot be given with another (%s): give none alone, or the allowances to keep",
			keys[0], strings.Join(specs, ", "))
	}
	for name := range lf.ints { // the integer flags given (intFlag records no more than the value)
		if given(fs, name) {
			lf.set[name] = true
		}
	}
	if len(lf.set) == 0 {
		return usageErr("limits set %s: give at least one of --max-concurrent, --rps, --burst, --tpm, --token-burst, --itpm, --input-token-burst, --otpm, --output-token-burst, --max-inflight-tokens, --allowance, --on-spent", keys[0])
	}
	if err := throttle.ValidateKey(keys[0]); err != nil {
		return usageErr("%v", err)
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	who := pgqueue.WithChangedBy(ctx, r.operator()+" (sluice limits set)")
	if _, err := r.q.ChangeLimit(who, keys[0], lf.change(), *create); err != nil {
		switch {
		case isUnknown(err):
			return notFoundErr(fmt.Errorf("%w (add --create to create it)", err))
		case errors.Is(err, pgqueue.ErrInvalidLimit) && !*create && strings.Contains(err.Error(), "sets none of"):
			// A change that would leave the key no limit at all: what removes a key is delete.
			return usageErr("%s; to remove the key, run: sluice limits delete %s --yes", inFlagNames(err.Error(), keys[0]), keys[0])
		case errors.Is(err, pgqueue.ErrInvalidLimit):
			return usageErr("%s", inFlagNames(err.Error(), keys[0]))
		}
		return err
	}
	return r.printLimits(ctx, keys[:1])
}

// allowancesTable prints, under a table of limits and only when one of them has allowances, each
// allowance's use in its window, what remains, and when it resets.
func allowancesTable(w io.Writer, st []pgqueue.KeyStatus) error {
	var any bool
	for _, s := range st {
		any = any || len(s.Allowances) > 0
	}
	if !any {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tALLOWANCE\tON SPENT\tUSED\tREMAINING\tRESETS")
	for _, s := range st {
		for _, a := range s.Allowances {
			spec := a.Spec
			for _, c := range s.Configured.Allowances {
				if c.Key() == a.Allowance.Key() && c.Amount != a.Allowance.Amount {
					spec += fmt.Sprintf(" (set %s)", c.FormatAmount(c.Amount))
				}
			}
			resets := none
			if !a.ResetsAt.IsZero() {
				resets = words.Until(a.ResetsAt, s.Now)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Configured.Key, spec, cmp.Or(string(a.Allowance.OnSpent), string(throttle.OnSpentWait)),
				words.Amount(a.Allowance, a.Used), words.Amount(a.Allowance, a.Remaining), resets)
		}
	}
	return tw.Flush()
}
