package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"os"
)

// typescriptMain runs the TypeScript scenario and prints its summary, or its JSON with -json.
func typescriptMain(ctx context.Context, f flags, db, addr string) int {
	cfg := TSConfig{Config: DefaultConfig(), Node: f.node, WorkerJS: f.tsWorker, Workers: f.tsWorkers}
	if f.short {
		cfg.Config = ShortConfig()
	}
	cfg.Docs, cfg.TPM, cfg.RPM = cmp.Or(f.docs, cfg.Docs), cmp.Or(f.tpm, cfg.TPM), cmp.Or(f.rpm, cfg.RPM)
	cfg.Pooler = f.pooler
	var progress io.Writer = os.Stdout
	if f.asJSON {
		progress = os.Stderr
	} else {
		fmt.Printf("A TypeScript workflow summarises %d documents (%d-%d chars) at once, in %d node workers, each call through withSluice\n"+
			"and a Sluice gate, against a fake provider allowing %.0f tokens/min and %.0f requests/min\n",
			cfg.Docs, cfg.MinLen, cfg.MaxLen, cfg.Workers, cfg.TPM, cfg.RPM)
	}
	r, err := runTypeScript(ctx, cfg, db, addr, progress)
	if err != nil {
		stdlog.Print(err)
		return 1
	}
	if f.asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(r)
	} else {
		printTS(os.Stdout, cfg, r)
	}
	if r.RateLimited > 0 || r.Completed != cfg.Docs {
		return 1
	}
	return 0
}

// printTS prints the TypeScript scenario's summary: the calls, the 429s, and the quota used.
func printTS(w io.Writer, cfg TSConfig, r TSResult) {
	lim := SluiceLimit(cfg.Config)
	fmt.Fprintf(w, "\nTypeScript fan-out through the gate: %d documents, %d node workers\n\n", cfg.Docs, cfg.Workers)
	fmt.Fprintf(w, "  calls             %d/%d documents summarised, %d requests at the provider\n", r.Completed, cfg.Docs, r.Calls)
	fmt.Fprintf(w, "  429s              %d at the provider (%d seen by the workflow)\n", r.RateLimited, r.WorkflowRateLimited)
	fmt.Fprintf(w, "  requests, peak    %d in the busiest second; quota %.1f/s (%.0f/min), the provider's burst %.0f\n",
		r.PeakRequests1s, cfg.RPM/60, cfg.RPM, max(1, cfg.RPM/60*cfg.Provider.BurstSeconds))
	fmt.Fprintf(w, "  tokens, peak      %d in the busiest minute; quota %.0f/min, the provider's burst %.0f\n",
		r.PeakTokens60s, cfg.TPM, cfg.TPM/60*cfg.Provider.BurstSeconds)
	fmt.Fprintf(w, "  tokens, all       %d in %.1fs: %.1f%% of the quota over the run (floor %.1fs)\n",
		r.Tokens, r.WallSeconds, r.QuotaShare, r.FloorSeconds)
	fmt.Fprintf(w, "  longest wait      %.1fs in line for a permit\n", r.MaxWaitedSeconds)
	fmt.Fprintf(w, "  wall time         %.1fs\n", r.WallSeconds)
	fmt.Fprintf(w, "\nThe gate's limit: %.1f requests/s (burst %.0f), %.0f tokens/min (burst %.0f); the provider's buckets hold %.0fs of each.\n",
		lim.RequestsPerSecond, lim.Burst, lim.TokensPerMinute, lim.TokenBurst, cfg.Provider.BurstSeconds)
}
