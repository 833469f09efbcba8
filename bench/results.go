package main

import (
	"fmt"
	"strings"
	"time"
)

// results is everything one run of the benchmark measured; it is written as results.json.
type results struct {
	Started      time.Time          `json:"started"`
	Finished     time.Time          `json:"finished"`
	Short        bool               `json:"short"`
	Rounds       int                `json:"rounds"`
	Tickets      int                `json:"tickets_per_run"`
	ClaimBatch   int                `json:"sluice_claim_batch"`
	Machine      Machine            `json:"machine"`
	Pgbench      *pgbenchResult     `json:"pgbench,omitempty"`
	Fleet        *fleetResult       `json:"fleet,omitempty"`
	Connections  *connectionsResult `json:"connections,omitempty"`
	Enqueue      []pair             `json:"enqueue,omitempty"`
	ClaimLatency []latency          `json:"claim_latency,omitempty"`
	Rate         []rateResult       `json:"rate_accuracy,omitempty"`
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// markdown renders the results as the table docs/performance.md quotes.
func (r *results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %d CPUs (%s); %d round(s), medians; %d tickets per run; Sluice's claim batch %d.\n\n",
		r.Started.Format("2006-01-02 15:04 MST"), r.Machine.CPUs, r.Machine.GoVersion, r.Rounds, r.Tickets, r.ClaimBatch)
	if p := r.Pgbench; p != nil {
		if p.Skipped != "" {
			fmt.Fprintf(&b, "pgbench: skipped: %s\n\n", p.Skipped)
		} else {
			fmt.Fprintf(&b, "Ceiling: pgbench simple-update (-N -c 8 -j 2, %d s): %.0f tx/s (load %.1f).\n\n", p.Seconds, p.MedianTPS, p.LoadAverage[0])
		}
	}
	if r.Fleet != nil {
		b.WriteString(r.Fleet.markdown())
	}
	if r.Connections != nil {
		b.WriteString(r.Connections.markdown())
	}
	if len(r.Enqueue) > 0 {
		b.WriteString("| figure | Sluice /s | River /s | ratio | target | statements per ticket (Sluice / River) | transactions per ticket (Sluice / River) | load (1 min) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|\n")
		for _, p := range r.Enqueue {
			st := func(rs []run) float64 { return median(rs, func(x run) float64 { return x.StatementsPerTicket }) }
			tx := func(rs []run) float64 { return median(rs, func(x run) float64 { return x.TransactionsPerTicket }) }
			load := median(p.Sluice, func(x run) float64 { return x.LoadAverage[0] })
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f | >= %.1f (%s) | %.3f / %.3f | %.3f / %.3f | %.1f |\n", p.Name,
				p.SluiceMedian, p.RiverMedian, p.Ratio, p.Target, verdict(p.Ratio >= p.Target),
				st(p.Sluice), st(p.River), tx(p.Sluice), tx(p.River), load)
		}
		b.WriteString("\n")
	}
	if len(r.ClaimLatency) > 0 {
		b.WriteString("| queued | claim of 10, median | p90 | vs 1k | load (1 min) |\n|---|---|---|---|---|\n")
		base := r.ClaimLatency[0].MedianMs
		for _, l := range r.ClaimLatency {
			fmt.Fprintf(&b, "| %d | %.2f ms | %.2f ms | %.2fx | %.1f |\n", l.Queued, l.MedianMs, l.P90Ms, l.MedianMs/base, l.LoadAverage[0])
		}
		b.WriteString("\n")
	}
	if len(r.Rate) > 0 {
		b.WriteString("| rate accuracy | CPU burner | claimers | rate | burst | admitted of allowed | largest 1 s | largest excess over the rate (<= burst) | load (1 min) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range r.Rate {
			fmt.Fprintf(&b, "| %s | %v | %d | %.0f/s | %.0f | %.1f%% (%s) | %.0f | %.1f (%s) | %.1f |\n", x.Dimension, x.Burner, x.Claimers,
				x.Rate, x.Burst, 100*x.Share, verdict(x.Share >= 0.98), x.LargestSec, x.Excess, verdict(x.Conforms), x.LoadAverage[0])
		}
		b.WriteString("\n")
	}
	return b.String()
}
