package main

import (
	"fmt"
	"strings"
)

// summarize takes the medians of the row's runs, River's best of 1 and Replicas clients, and the
// ratios.
func (row *fleetRow) summarize() {
	row.SluiceMedian, row.RiverMedian = medianRun(row.Sluice), medianRun(row.River)
	row.River1Median = row.RiverMedian // one replica: River's runs are of one client
	if len(row.River1) > 0 {
		row.River1Median = medianRun(row.River1)
	}
	row.RiverBest, row.RiverBestClients = row.RiverMedian, row.Replicas
	if row.River1Median.PerSecond > row.RiverMedian.PerSecond {
		row.RiverBest, row.RiverBestClients = row.River1Median, 1
	}
	if row.RiverMedian.PerSecond > 0 {
		row.Ratio = row.SluiceMedian.PerSecond / row.RiverMedian.PerSecond
	}
	if row.RiverBest.PerSecond > 0 {
		row.RatioBest = row.SluiceMedian.PerSecond / row.RiverBest.PerSecond
	}
}

// medianRun returns the median of each figure of rs, the largest connection counts, and every
// failure and error summed up.
func medianRun(rs []fleetRun) fleetRun {
	var m fleetRun
	fields := []func(*fleetRun) *float64{
		func(r *fleetRun) *float64 { return &r.PerSecond },
		func(r *fleetRun) *float64 { return &r.Seconds },
		func(r *fleetRun) *float64 { return &r.StatementsPerTicket },
		func(r *fleetRun) *float64 { return &r.TransactionsPerTicket },
		func(r *fleetRun) *float64 { return &r.PgCPUPer1k },
		func(r *fleetRun) *float64 { return &r.LoadAverage[0] },
		func(r *fleetRun) *float64 { return &r.LoadAverage[1] },
		func(r *fleetRun) *float64 { return &r.LoadAverage[2] },
		func(r *fleetRun) *float64 { return &r.AdmitP50Ms },
		func(r *fleetRun) *float64 { return &r.AdmitP99Ms },
		func(r *fleetRun) *float64 { return &r.TakeLagP50Ms },
		func(r *fleetRun) *float64 { return &r.TakeLagP99Ms },
		func(r *fleetRun) *float64 { return &r.ClaimsPerTicket },
		func(r *fleetRun) *float64 { return &r.EmptyClaimsPerTicket },
		func(r *fleetRun) *float64 { return &r.TakesPerTicket },
		func(r *fleetRun) *float64 { return &r.EmptyTakesPerTicket },
		func(r *fleetRun) *float64 { return &r.TakenShare },
		func(r *fleetRun) *float64 { return &r.WALPerTicket },
		func(r *fleetRun) *float64 { return &r.WALEnqueuePerTicket },
	}
	for _, f := range fields {
		*f(&m) = median(rs, func(r fleetRun) float64 { return *f(&r) })
	}
	for _, r := range rs {
		m.Connections, m.BusyConnections = max(m.Connections, r.Connections), max(m.BusyConnections, r.BusyConnections)
		m.FailedClaims += r.FailedClaims
		m.FailedTakes += r.FailedTakes
		m.Errors = append(m.Errors, r.Errors...)
	}
	return m
}

// markdown renders the fleet figure's table.
func (f *fleetResult) markdown() string {
	var b strings.Builder
	if f.Skipped != "" {
		fmt.Fprintf(&b, "Fleet: skipped: %s\n\n", f.Skipped)
		return b.String()
	}
	fmt.Fprintf(&b, "Fleet: %d tickets per run, written beforehand; each replica (River client) a pool of %d plus a listener; "+
		"a private cluster: %s. S = Sluice, R = River with as many clients as replicas, R best = the faster of River "+
		"with 1 and with that many clients. WAL: the drain's bytes per ticket (start to last completion), and the fill's "+
		"(EnqueueMany, InsertMany), each run after a CHECKPOINT.\n\n", f.Tickets, f.PoolSize, settingsLine(f.Settings))
	b.WriteString("| replicas | lines | Sluice /s | River /s | ratio | River best /s (clients) | ratio to best | " +
		"WAL B/ticket S / R best | enqueue WAL B/ticket S / R best | admission p50 / p99 ms | take lag p50 / p99 ms | " +
		"claims / empty claims per ticket | takes / empty takes per ticket | statements per ticket S / R | transactions per ticket S / R | " +
		"max connections (busy) S / R | PG CPU s per 1k S / R | load 1 min S / R |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var failures []string
	for _, row := range f.Rows {
		s, r, best := row.SluiceMedian, row.RiverMedian, row.RiverBest
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f | %.2f | %.0f (%d) | %.2f | %.0f / %.0f | %.0f / %.0f | ",
			row.Replicas, row.name(), s.PerSecond, r.PerSecond, row.Ratio, best.PerSecond, row.RiverBestClients, row.RatioBest,
			s.WALPerTicket, best.WALPerTicket, s.WALEnqueuePerTicket, best.WALEnqueuePerTicket)
		fmt.Fprintf(&b, "%.0f / %.0f | %.0f / %.0f | %.3f / %.3f | %.3f / %.3f | %.2f / %.2f | %.2f / %.2f | %d (%d) / %d (%d) | %.2f / %.2f | %.1f / %.1f |\n",
			s.AdmitP50Ms, s.AdmitP99Ms, s.TakeLagP50Ms, s.TakeLagP99Ms,
			s.ClaimsPerTicket, s.EmptyClaimsPerTicket, s.TakesPerTicket, s.EmptyTakesPerTicket,
			s.StatementsPerTicket, r.StatementsPerTicket, s.TransactionsPerTicket, r.TransactionsPerTicket,
			s.Connections, s.BusyConnections, r.Connections, r.BusyConnections, s.PgCPUPer1k, r.PgCPUPer1k,
			s.LoadAverage[0], r.LoadAverage[0])
		if s.FailedClaims+s.FailedTakes > 0 {
			failures = append(failures, fmt.Sprintf("- %d replicas, %s lines: %d failed claim(s), %d failed take(s): %q",
				row.Replicas, row.name(), s.FailedClaims, s.FailedTakes, s.Errors))
		}
	}
	b.WriteString("\n")
	if len(failures) > 0 {
		b.WriteString("**Failed claims or takes:**\n\n" + strings.Join(failures, "\n") + "\n\n")
	}
	return b.String()
}
