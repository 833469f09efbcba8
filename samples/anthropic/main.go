// Command anthropic shows Sluice on Anthropic's three quotas: requests, input tokens and output
// tokens per minute (RPM, ITPM, OTPM), each a continuously refilled bucket. A workflow summarises 60
// documents at once, one activity each, through the official Anthropic Go client
// (github.com/anthropics/anthropic-sdk-go/v2) against a local fake of the Messages API that enforces
// the quotas as Anthropic documents them: a call is charged its input tokens (cache reads excepted)
// and its max_tokens at admission, the unused part of max_tokens is given back when it ends, a call
// that does not fit gets 429 with retry-after, and every response carries the
// anthropic-ratelimit-* headers. The account's output budget is tight (8,000 output tokens a minute
// against 200,000 input tokens and 600 requests), so output is what binds.
//
// The starter counts each document's input tokens once with count_tokens (Messages.CountTokens) and
// passes the count in the activity's argument; the Sluice route reserves it as input and max_tokens
// as output (Route.Tokens). The activity reports the headers (ReportHeaders), a 429 (RateLimited) and
// the usage (ReportAnthropicUsage). The same work runs three ways:
//
//   - sluice: one Sluice limit with the three quotas.
//   - input-only: the same route, with a limit on requests and input tokens only (no
//     OutputTokensPerMinute): the single token budget of before the output dimension.
//   - none: no throttle; Temporal's default retry policy (1 s, doubling, up to 100 s) retries the
//     429s. Not run by default: it took 40 minutes here, most of it backing off.
//
// It prints, per mode, the wall time, the 429s and each quota's use over the busy period (first
// admission to last, see Use), and the input estimate's error against the provider's count.
//
//	temporal server start-dev                       # in another terminal: Temporal at localhost:7233
//	go run ./samples/anthropic                      # sluice and input-only, under 3 minutes
//	go run ./samples/anthropic -modes sluice,input-only,none   # and none: 40 minutes more
//	go run ./samples/anthropic -short               # three times the quota: about 25 s per mode
//	go run ./samples/anthropic -modes sluice -docs 120 -json
//	make demo-anthropic                             # Postgres and a Temporal dev server found or started
//	make test                                       # the short form, with its assertions
//
// It takes what any program with Sluice takes: a Temporal frontend, -temporal (default
// $TEMPORAL_ADDRESS, else localhost:7233), and a Postgres, -database (default $DATABASE_URL, else
// postgres://postgres@localhost:5432/postgres?sslmode=disable), where each mode's Sluice tables go in
// a schema of their own, dropped at the end. The fake Messages API runs in the process: no API key.
package main

import (
	"github.com/sluicehq/sluice/samples/internal/poolflags"

	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"strings"

	"go.temporal.io/sdk/client"
)

// flags are the command line.
type flags struct {
	temporal, database string
	modes              string
	short, asJSON      bool
	docs               int
	afterAdjust        bool
	pooler             poolflags.Pooler
}

func parseFlags() (flags, error) {
	var f flags
	pooler, err := poolflags.Define(flag.CommandLine)
	if err != nil {
		return f, err
	}
	flag.StringVar(&f.temporal, "temporal", "", "the Temporal frontend, host:port (default $TEMPORAL_ADDRESS, else "+client.DefaultHostPort+")")
	// DATABASE_URL is read after parsing, not made the flag's default, so that -h does not print it.
	flag.StringVar(&f.database, "database", "", "the Postgres URL (default $DATABASE_URL, else "+defaultDatabaseURL+")")
	flag.BoolVar(&f.short, "short", false, "three times the quota: about 25 s per mode")
	flag.StringVar(&f.modes, "modes", "", "modes to run, in order: sluice, input-only, none (default sluice,input-only; none takes long)")
	flag.IntVar(&f.docs, "docs", 0, "documents to summarise (default 60)")
	flag.BoolVar(&f.asJSON, "json", false, "print one JSON object per mode instead of the table")
	flag.BoolVar(&f.afterAdjust, "headers-after-adjustment", false,
		"the provider writes an answer's rate-limit headers after its unused max_tokens went back, not before")
	flag.Parse()
	f.pooler = pooler()
	return f, nil
}

// modeList splits the -modes flag, checking each name.
func modeList(s string) ([]string, error) {
	var out []string
	for m := range strings.SplitSeq(s, ",") {
		switch m = strings.TrimSpace(m); m {
		case "":
		case ModeSluice, ModeInputOnly, ModeNone:
			out = append(out, m)
		default:
			return nil, fmt.Errorf("-modes: unknown mode %q (want sluice, input-only or none)", m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-modes must name a mode, got %q", s)
	}
	return out, nil
}

func main() { os.Exit(realMain()) }

// realMain is main, returning the exit code so that the deferred clean-ups run.
func realMain() int {
	f, err := parseFlags()
	if err != nil {
		stdlog.Print(err)
		return 2
	}
	cfg := DefaultConfig()
	if f.short {
		cfg = ShortConfig()
	}
	cfg.Docs = cmp.Or(f.docs, cfg.Docs)
	cfg.Provider.HeadersAfterAdjustment = f.afterAdjust
	cfg.Pooler = f.pooler
	if f.modes != "" {
		cfg.Modes, err = modeList(f.modes)
	}
	if err == nil && f.docs < 0 {
		err = fmt.Errorf("-docs must be positive, got %d", f.docs)
	}
	if err != nil {
		stdlog.Print(err)
		return 2
	}
	ctx := context.Background()
	addr := cmp.Or(f.temporal, os.Getenv("TEMPORAL_ADDRESS"), client.DefaultHostPort)
	db := cmp.Or(f.database, os.Getenv("DATABASE_URL"), defaultDatabaseURL)

	cfg.Progress = cmp.Or(cfg.Progress, DefaultConfig().Progress)
	var progress io.Writer = os.Stdout
	done := func(r Result) {
		fmt.Printf("%-10s finished: %d/%d documents in %.1fs, %d 429s, output quota %.1f%%\n",
			r.Mode, r.Completed, r.Docs, r.WallSeconds, r.RateLimited, r.OutputShare)
	}
	if f.asJSON {
		progress = os.Stderr // stdout carries only the JSON lines
		enc := json.NewEncoder(os.Stdout)
		done = func(r Result) { _ = enc.Encode(r) }
	} else {
		fmt.Println(setup(cfg))
	}
	rs, err := runAll(ctx, cfg, db, addr, progress, done)
	if err != nil {
		stdlog.Print(err)
	}
	if !f.asJSON && len(rs) > 0 {
		printTable(os.Stdout, cfg, rs)
	}
	if err != nil {
		return 1
	}
	return 0
}

// setup says what runs.
func setup(cfg Config) string {
	pc := cfg.Provider
	return fmt.Sprintf("Summarising %d documents (%d-%d words, max_tokens %d) with %d workers, against a fake Anthropic account allowing\n"+
		"%.0f requests, %.0f input tokens and %.0f output tokens per minute (buckets of %gs); modes %s",
		cfg.Docs, cfg.MinWords, cfg.MaxWords, cfg.MaxTokens, cfg.Workers, pc.RPM, pc.ITPM, pc.OTPM, pc.BurstSeconds, strings.Join(cfg.Modes, ", "))
}

// printTable prints the results side by side, and what the shares mean.
func printTable(w io.Writer, cfg Config, rs []Result) {
	fmt.Fprintf(w, "\n%-10s | %9s | %6s | %7s | %27s | %14s | %9s\n", "mode", "wall time", "429s", "retries",
		"quota used: req / in / out", "estimate error", "completed")
	fmt.Fprintf(w, "%-10s | %9s | %6s | %7s | %27s | %14s | %9s\n", "", "lower", "lower", "lower", "out: higher, <= 100%", "mean / max", "")
	fmt.Fprintln(w, strings.Repeat("-", 10+3+9+3+6+3+7+3+27+3+14+3+9))
	for _, r := range rs {
		fmt.Fprintf(w, "%-10s | %8.1fs | %6d | %7d | %7.1f%% / %5.1f%% / %5.1f%% | %5.2f%% / %4.2f%% | %9s\n",
			r.Mode, r.WallSeconds, r.RateLimited, r.Retries, r.RequestsShare, r.InputShare, r.OutputShare,
			r.EstimateErrorMean, r.EstimateErrorMax, fmt.Sprintf("%d/%d", r.Completed, r.Docs))
	}
	pc := cfg.Provider
	fmt.Fprintf(w, "\nquota used = what the provider accepted from the first admission to the last (the busy period: the\n"+
		"run had calls waiting), divided by the most it would have accepted in that time: its bucket, full\n"+
		"at the start (%gs worth), plus its rate times the period. Accepted: requests charged (429s included),\n"+
		"input tokens charged (cache reads excluded), real output tokens of the admitted calls. It cannot pass\n"+
		"100%%; output (%.0f/min) is the quota that binds. Estimate error: the route's input estimate\n"+
		"(count_tokens) against the provider's count of each answered call's prompt.\n", pc.BurstSeconds, pc.OTPM)
}
