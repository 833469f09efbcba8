package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/sluicehq/sluice/internal/testkit/pgcluster"
)

// fleetMaxConnections is the private cluster's max_connections: 128 replicas of a pool of 2 and a
// listener are 384 connections, past the shared Postgres's 100.
const fleetMaxConnections = 600

// fleetRun is one measured fleet run, of Sluice or of River.
type fleetRun struct {
	PerSecond             float64 `json:"per_second"`
	Seconds               float64 `json:"seconds"`
	StatementsPerTicket   float64 `json:"statements_per_ticket"`
	TransactionsPerTicket float64 `json:"transactions_per_ticket"`
	// Connections is the most connections of the fleet open at once (pg_stat_activity, sampled every
	// 150 ms); BusyConnections the most of them not idle.
	Connections     int `json:"max_connections"`
	BusyConnections int `json:"max_busy_connections"`
	// PgCPUPer1k is the private cluster's CPU seconds (user + system) per 1,000 tickets.
	PgCPUPer1k  float64    `json:"pg_cpu_seconds_per_1k"`
	LoadAverage [3]float64 `json:"load_average"`

	// Sluice only. AdmitP50Ms and AdmitP99Ms: admitted_at - greatest(enqueued_at, start).
	AdmitP50Ms float64 `json:"admit_p50_ms,omitempty"`
	AdmitP99Ms float64 `json:"admit_p99_ms,omitempty"`
	// TakeLag: admitted_at to the take that handed the ticket to its owner, for tickets another
	// replica admitted (the owner's own claims run theirs at once).
	TakeLagP50Ms         float64  `json:"take_lag_p50_ms,omitempty"`
	TakeLagP99Ms         float64  `json:"take_lag_p99_ms,omitempty"`
	ClaimsPerTicket      float64  `json:"claims_per_ticket,omitempty"`
	EmptyClaimsPerTicket float64  `json:"empty_claims_per_ticket,omitempty"`
	TakesPerTicket       float64  `json:"takes_per_ticket,omitempty"`
	EmptyTakesPerTicket  float64  `json:"empty_takes_per_ticket,omitempty"`
	TakenShare           float64  `json:"taken_share,omitempty"` // of the tickets, those that came by a take
	FailedClaims         int      `json:"failed_claims,omitempty"`
	FailedTakes          int      `json:"failed_takes,omitempty"`
	Errors               []string `json:"errors,omitempty"`
}

// fleetRow is one configuration measured for Sluice and River, round after round.
type fleetRow struct {
	fleetShape
	Sluice       []fleetRun `json:"sluice_runs"`
	River        []fleetRun `json:"river_runs"`
	SluiceMedian fleetRun   `json:"sluice_median"`
	RiverMedian  fleetRun   `json:"river_median"`
	Ratio        float64    `json:"ratio"` // of the medians' per-second figures, Sluice / River
}

// fleetResult is the fleet figure: its rows, or why it was skipped.
type fleetResult struct {
	Skipped        string     `json:"skipped,omitempty"`
	Tickets        int        `json:"tickets_per_run"`
	PoolSize       int        `json:"pool_size"`
	MaxConnections int        `json:"private_cluster_max_connections"`
	Rows           []fleetRow `json:"rows,omitempty"`
}

// fleetEnv is the private cluster the fleet figure runs on, and what every run of it shares.
type fleetEnv struct {
	url      string
	env      *env // setup: migrations, fills, checks; its pools are not counted
	probe    *pgProbe
	poolSize int
	batch    int
	// count and riverCount count the statements of every replica's pool, Sluice's and River's.
	count, riverCount *counter
}

// startFleetEnv starts a private cluster of maxConns connections and the environment the fleet's
// runs share on it; stop closes the environment and stops the cluster, removing its directory. Without
// the server binaries it returns an error wrapping pgcluster.ErrUnavailable.
func startFleetEnv(ctx context.Context, c config, maxConns int) (fe *fleetEnv, stop func(), err error) {
	cluster, err := pgcluster.New(pgcluster.Options{MaxConnections: maxConns})
	if err != nil {
		return nil, nil, err
	}
	pid, err := cluster.PostmasterPID()
	if err == nil {
		fe = &fleetEnv{url: cluster.URL, probe: newPgProbe(cluster.URL, pid), poolSize: c.fleetPool, batch: c.claimBatch,
			count: &counter{}, riverCount: &counter{}}
		fe.env, err = newEnv(ctx, cluster.URL)
	}
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	return fe, func() { fe.env.close(); cluster.Close() }, nil
}

// measureFleet takes the fleet figure on a private cluster it starts (and stops, removing its
// directory, whatever happens): for each shape, Sluice's replicas beside as many River clients, in
// turn, round after round.
func measureFleet(ctx context.Context, _ *env, c config, res *results) error {
	fr := &fleetResult{Tickets: c.fleetTickets, PoolSize: c.fleetPool, MaxConnections: fleetMaxConnections}
	res.Fleet = fr
	fe, stop, err := startFleetEnv(ctx, c, fleetMaxConnections)
	if errors.Is(err, pgcluster.ErrUnavailable) {
		fr.Skipped = err.Error()
		log.Printf("bench: fleet skipped: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer stop()
	for _, r := range c.fleetReplicas {
		for _, l := range c.fleetLines {
			fr.Rows = append(fr.Rows, fleetRow{fleetShape: fleetShape{Replicas: r, Lines: l}})
		}
		if c.fleetTenants > 0 {
			fr.Rows = append(fr.Rows, fleetRow{fleetShape: fleetShape{Replicas: r, Lines: 1, TenantCaps: c.fleetTenants}})
		}
	}
	for round := range c.rounds {
		for i := range fr.Rows {
			if err := fleetRound(ctx, fe, &fr.Rows[i], round, c.fleetTickets); err != nil {
				return fmt.Errorf("%d replicas, %s lines: %w", fr.Rows[i].Replicas, fr.Rows[i].name(), err)
			}
		}
	}
	for i := range fr.Rows {
		fr.Rows[i].summarize()
	}
	return nil
}

// fleetRound measures one round of row: Sluice and River in turn, which first alternating by round.
func fleetRound(ctx context.Context, fe *fleetEnv, row *fleetRow, round, n int) error {
	sluice := func() error {
		r, err := sluiceFleet(ctx, fe, row.fleetShape, n)
		row.Sluice = append(row.Sluice, r)
		return err
	}
	river := func() error {
		r, err := riverFleet(ctx, fe, row.Replicas, n)
		row.River = append(row.River, r)
		return err
	}
	if err := inTurn(round, sluice, river); err != nil {
		return err
	}
	s, r := row.Sluice[len(row.Sluice)-1], row.River[len(row.River)-1]
	log.Printf("bench: round %d: fleet of %d, %s line(s): sluice %.0f/s (%.2f empty claims/ticket, %.1f stmts/ticket), river %.0f/s, load %.1f",
		round+1, row.Replicas, row.name(), s.PerSecond, s.EmptyClaimsPerTicket, s.StatementsPerTicket, r.PerSecond, s.LoadAverage[0])
	return nil
}

// summarize takes the medians of the row's runs and their ratio.
func (row *fleetRow) summarize() {
	row.SluiceMedian, row.RiverMedian = medianRun(row.Sluice), medianRun(row.River)
	if row.RiverMedian.PerSecond > 0 {
		row.Ratio = row.SluiceMedian.PerSecond / row.RiverMedian.PerSecond
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
	fmt.Fprintf(&b, "Fleet: %d tickets per run, written beforehand; each replica a pool of %d plus a listener; "+
		"a private cluster (max_connections %d). S = Sluice, R = River.\n\n", f.Tickets, f.PoolSize, f.MaxConnections)
	b.WriteString("| replicas | lines | Sluice /s | River /s | ratio | admission p50 / p99 ms | take lag p50 / p99 ms | " +
		"claims / empty claims per ticket | takes / empty takes per ticket | statements per ticket S / R | transactions per ticket S / R | " +
		"max connections (busy) S / R | PG CPU s per 1k S / R | load 1 min S / R |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	var failures []string
	for _, row := range f.Rows {
		s, r := row.SluiceMedian, row.RiverMedian
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f | %.2f | %.0f / %.0f | %.0f / %.0f | %.3f / %.3f | %.3f / %.3f | %.2f / %.2f | %.2f / %.2f | %d (%d) / %d (%d) | %.2f / %.2f | %.1f / %.1f |\n",
			row.Replicas, row.name(), s.PerSecond, r.PerSecond, row.Ratio, s.AdmitP50Ms, s.AdmitP99Ms, s.TakeLagP50Ms, s.TakeLagP99Ms,
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
