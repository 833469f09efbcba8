// Command llm is Sluice's main demo. Its default scenario, shared, is the everyday shape of LLM work
// on Temporal: one provider account's quota (tokens and requests per minute) shared by two services
// on two task queues, served by three worker replicas. A batch backfill of several tenants' documents
// (one tenant much larger than the others) starts first; while it runs, a person asks an assistant a
// question every second and waits for the answer. The fake provider behaves as real ones document:
// continuously refilled buckets with a burst, 429 with Retry-After and retry-after-ms, rate-limit
// headers on every response, refused requests counted against the request limit. The same work runs
// three times:
//
//   - none: no throttle; Temporal's default retry policy (1 s, doubling) retries the 429s.
//   - temporal: the built-in at its best: each task queue's share of the quota as its
//     TaskQueueActivitiesPerSecond, and the tenant as the server's fairness key.
//   - sluice: one Sluice limit for the account, the assistant's calls ahead of the backfill's, the
//     backfill shared fairly between tenants.
//
// It prints a table (each column says which way is better) and writes a self-contained HTML report
// with, per mode, the tokens per minute over time against the quota and the assistant's latency
// distribution. The second scenario, fanout, is one workflow summarising 120 documents at once. The
// third, typescript (make demo-typescript), is the fan-out written in TypeScript (samples/typescript):
// node workers run the workflow, each call admitted by a Sluice gate hosted here, through withSluice.
//
//	make demo                                   # Postgres and a Temporal dev server are found or started
//
//	temporal server start-dev --dynamic-config-value matching.enableFairness=true   # in another terminal
//	go run ./samples/llm                        # against it and a local Postgres
//	go run ./samples/llm -json                  # one JSON object per mode instead of the table
//	go run ./samples/llm -report /tmp/r.html    # where the report goes
//	go run ./samples/llm -scenario fanout -docs 60 -tpm 30000 -rpm 120 -modes sluice
//	go run ./samples/llm -scenario typescript -short   # after make ts-sample
//
// It takes what any program with Sluice takes: a Temporal frontend, -temporal (default
// $TEMPORAL_ADDRESS, else localhost:7233), and a Postgres, -database (default $DATABASE_URL, else
// postgres://postgres@localhost:5432/postgres?sslmode=disable), where each mode's Sluice tables go in
// a schema of their own, dropped at the end. The temporal mode's fairness keys need the server's
// fairness turned on (matching.enableFairness, Temporal server 1.29 and later, as above); without it
// that mode runs with the task queues' rates alone.
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
	"path/filepath"
	"strings"

	"go.temporal.io/sdk/client"
)

// flags are the command line.
type flags struct {
	temporal, database      string
	scenario, modes, report string
	explainSample           string
	tsWorker, node          string
	tsWorkers               int
	short, asJSON           bool
	pooler                  poolflags.Pooler
	docs                    int
	tpm, rpm                float64
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
	flag.StringVar(&f.scenario, "scenario", "shared", "shared (a backfill and an assistant share one quota), fanout (one workflow, 120 documents), "+
		"or typescript (the fan-out in a TypeScript workflow, through a gate)")
	flag.StringVar(&f.tsWorker, "ts-worker", DefaultTSWorker, "typescript: the TypeScript sample's compiled worker")
	flag.StringVar(&f.node, "node", "node", "typescript: the node binary")
	flag.IntVar(&f.tsWorkers, "ts-workers", 2, "typescript: node worker processes")
	flag.BoolVar(&f.short, "short", false, "a small quick configuration, seconds per mode")
	flag.IntVar(&f.docs, "docs", 0, "fanout: documents to summarise (default 120, -short 12)")
	flag.Float64Var(&f.tpm, "tpm", 0, "the provider's tokens-per-minute quota (default: the scenario's)")
	flag.Float64Var(&f.rpm, "rpm", 0, "the provider's requests-per-minute quota (default: the scenario's)")
	flag.StringVar(&f.modes, "modes", "none,temporal,sluice", "modes to run, in order: none, temporal, sluice")
	flag.BoolVar(&f.asJSON, "json", false, "print one JSON object per mode instead of the table")
	flag.StringVar(&f.report, "report", filepath.Join(os.TempDir(), "sluice-demo-report.html"), "shared: where the HTML report is written")
	flag.StringVar(&f.explainSample, "explain-sample", "", "sluice mode: sample queued tickets' explanations (every "+explainEvery.String()+
		", up to "+fmt.Sprint(explainPick)+" at random), set each estimate against the ticket's real admission, print the error and write the samples to this file, a JSON object a line")
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
		case ModeNone, ModeTemporal, ModeSluice:
			out = append(out, m)
		default:
			return nil, fmt.Errorf("-modes: unknown mode %q (want none, temporal or sluice)", m)
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
	modes, err := modeList(f.modes)
	if err == nil && (f.tpm < 0 || f.rpm < 0 || f.docs < 0) {
		err = fmt.Errorf("-docs, -tpm and -rpm must be positive, got %d, %g and %g", f.docs, f.tpm, f.rpm)
	}
	if err == nil && f.scenario != "shared" && f.scenario != "fanout" && f.scenario != "typescript" {
		err = fmt.Errorf("-scenario: unknown scenario %q (want shared, fanout or typescript)", f.scenario)
	}
	if err != nil {
		stdlog.Print(err)
		return 2
	}
	ctx := context.Background()
	addr := cmp.Or(f.temporal, os.Getenv("TEMPORAL_ADDRESS"), client.DefaultHostPort)
	db := cmp.Or(f.database, os.Getenv("DATABASE_URL"), defaultDatabaseURL)
	switch f.scenario {
	case "fanout":
		return fanoutMain(ctx, f, modes, db, addr)
	case "typescript":
		return typescriptMain(ctx, f, db, addr)
	}
	return sharedMain(ctx, f, modes, db, addr)
}

// sharedMain runs the shared scenario and prints its table or JSON, and writes its report.
func sharedMain(ctx context.Context, f flags, modes []string, db, addr string) int {
	cfg := DefaultSharedConfig()
	if f.short {
		cfg = ShortSharedConfig()
	}
	cfg.TPM, cfg.RPM, cfg.Modes = cmp.Or(f.tpm, cfg.TPM), cmp.Or(f.rpm, cfg.RPM), modes
	cfg.ExplainSample = f.explainSample != ""
	cfg.Pooler = f.pooler
	var progress io.Writer = os.Stdout
	done := func(r SharedResult) {
		fmt.Printf("%-8s finished: backfill %d/%d in %.1fs (floor %.1fs), answers p95 %.2fs, %d 429s, %d retries\n",
			r.Mode, r.Summaries, r.Docs, r.Batch, r.BatchFloor, r.InteractiveP95, r.RateLimited, r.Retries)
	}
	if f.asJSON {
		progress = os.Stderr // stdout carries only the JSON lines
		enc := json.NewEncoder(os.Stdout)
		done = func(r SharedResult) { _ = enc.Encode(r) }
	} else {
		fmt.Printf("%s\nModes: %s. Progress every %s.\n", sharedSetup(cfg), strings.Join(modes, ", "), cfg.Progress)
	}
	rs, err := runAllShared(ctx, cfg, db, addr, progress, done)
	if err != nil {
		stdlog.Print(err)
	}
	if len(rs) > 0 {
		if !f.asJSON {
			printSharedTable(os.Stdout, cfg, rs)
		}
		for _, r := range rs {
			if werr := explainOutput(f, r.Mode, r.Explain, r.ExplainFailures); werr != nil {
				stdlog.Print(werr)
				return 1
			}
		}
		if werr := writeReportFile(f.report, cfg, rs); werr != nil {
			stdlog.Print(werr)
			return 1
		}
		fmt.Fprintf(os.Stderr, "\nreport: %s\n", f.report)
	}
	if err != nil {
		return 1
	}
	return 0
}

// writeReportFile writes the report to path, creating its directory.
func writeReportFile(path string, cfg SharedConfig, rs []SharedResult) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeReport(out, cfg, rs); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// fanoutMain runs the fan-out scenario and prints its table or JSON.
func fanoutMain(ctx context.Context, f flags, modes []string, db, addr string) int {
	cfg := DefaultConfig()
	if f.short {
		cfg = ShortConfig()
	}
	cfg.Docs, cfg.TPM, cfg.RPM, cfg.Modes = cmp.Or(f.docs, cfg.Docs), cmp.Or(f.tpm, cfg.TPM), cmp.Or(f.rpm, cfg.RPM), modes
	cfg.ExplainSample = f.explainSample != ""
	cfg.Pooler = f.pooler
	var progress io.Writer = os.Stdout
	done := func(r Result) {
		fmt.Printf("%-8s finished: %d/%d documents in %.1fs, %.1f%% of the token quota, %d 429s, %d Temporal retries\n",
			r.Mode, r.Completed, cfg.Docs, r.WallSeconds, r.QuotaShare, r.RateLimited, r.Retries)
	}
	if f.asJSON {
		progress = os.Stderr
		enc := json.NewEncoder(os.Stdout)
		done = func(r Result) { _ = enc.Encode(r) }
	} else {
		fmt.Printf("Summarising %d documents (%d-%d chars) against a fake provider allowing %.0f tokens/min and %.0f requests/min; modes %s\n",
			cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.TPM, cfg.RPM, strings.Join(cfg.Modes, ", "))
	}
	rs, err := runAll(ctx, cfg, db, addr, progress, done)
	if err != nil {
		stdlog.Print(err)
	}
	if !f.asJSON && len(rs) > 0 {
		printTable(os.Stdout, cfg, rs)
	}
	for _, r := range rs {
		if werr := explainOutput(f, r.Mode, r.Explain, r.ExplainFailures); werr != nil {
			stdlog.Print(werr)
			return 1
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

// explainOutput prints the accuracy of the explanations sampled in mode (-explain-sample), to stdout
// or beside -json's lines to stderr, and writes the samples to the flag's file; nothing for a mode
// that sampled none.
func explainOutput(f flags, mode string, samples []explainSample, failures int) error {
	if f.explainSample == "" || mode != ModeSluice {
		return nil
	}
	out := os.Stdout
	if f.asJSON {
		out = os.Stderr
	}
	newExplainReport(samples, failures).print(out, mode)
	if err := writeExplainSamples(f.explainSample, samples); err != nil {
		return fmt.Errorf("-explain-sample: %w", err)
	}
	fmt.Fprintf(os.Stderr, "explanation samples: %s\n", f.explainSample)
	return nil
}
