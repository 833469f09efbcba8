package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"

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
	// WALPerTicket is the WAL bytes the run wrote per ticket (pg_current_wal_lsn before and after):
	// the drain, claims, takes and completions (River: fetches and completions).
	// WALEnqueuePerTicket is those of the fill before it (EnqueueMany, River's InsertMany).
	WALPerTicket        float64 `json:"wal_bytes_per_ticket"`
	WALEnqueuePerTicket float64 `json:"wal_enqueue_bytes_per_ticket"`

	// completed is how many tickets (jobs) the run completed: all but for an incomplete River run
	// (errRiverIncomplete). Not reported: the tables give written and completed where they differ.
	completed int64

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
	ReadsPerTicket       float64  `json:"reads_per_ticket,omitempty"` // reads of notified tickets, no write
	TakenShare           float64  `json:"taken_share,omitempty"`      // of the tickets, those that came by a take
	FailedClaims         int      `json:"failed_claims,omitempty"`
	FailedTakes          int      `json:"failed_takes,omitempty"`
	Errors               []string `json:"errors,omitempty"`

	// TopStatements are the run's statements that took the most server time (-fleet-statements).
	TopStatements []statementStat `json:"top_statements,omitempty"`
}

// fleetRow is one configuration measured for Sluice and River, round after round: River with as
// many clients as Sluice has replicas, and with one client (the same runs when Replicas is 1).
type fleetRow struct {
	fleetShape
	Sluice       []fleetRun `json:"sluice_runs"`
	River        []fleetRun `json:"river_runs"` // with Replicas clients
	River1       []fleetRun `json:"river_1_client_runs,omitempty"`
	SluiceMedian fleetRun   `json:"sluice_median"`
	RiverMedian  fleetRun   `json:"river_median"`
	River1Median fleetRun   `json:"river_1_client_median"`
	Ratio        float64    `json:"ratio"` // of the medians' per-second figures, Sluice / River (Replicas clients)
	// RiverBest is the faster median of River with 1 and with Replicas clients; RiverBestClients
	// which; RatioBest Sluice's median per second over it.
	RiverBest        fleetRun `json:"river_best_median"`
	RiverBestClients int      `json:"river_best_clients"`
	RatioBest        float64  `json:"ratio_to_river_best"`
}

// fleetResult is the fleet figure: its rows, or why it was skipped.
type fleetResult struct {
	Skipped        string `json:"skipped,omitempty"`
	Tickets        int    `json:"tickets_per_run"`
	PoolSize       int    `json:"pool_size"`
	MaxConnections int    `json:"private_cluster_max_connections"`
	// Settings is the private cluster's durability settings and version, read by SHOW at the start.
	Settings map[string]string `json:"cluster_settings,omitempty"`
	Rows     []fleetRow        `json:"rows,omitempty"`
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
	// statements: each run reports its statements from pg_stat_statements (-fleet-statements).
	statements bool
}

// startFleetEnv starts a private cluster of maxConns connections, durable (fsync, synchronous_commit
// and full_page_writes on, as users run PostgreSQL) unless c.fsyncOff, and the environment the
// fleet's runs share on it; stop closes the environment and stops the cluster, removing its
// directory. Without the server binaries it returns an error wrapping pgcluster.ErrUnavailable.
func startFleetEnv(ctx context.Context, c config, maxConns int) (fe *fleetEnv, stop func(), err error) {
	opts := pgcluster.Options{MaxConnections: maxConns, Durable: !c.fsyncOff}
	if c.fleetStatements {
		opts.Conf = statementsConf
	}
	cluster, err := pgcluster.New(opts)
	if err != nil {
		return nil, nil, err
	}
	pid, err := cluster.PostmasterPID()
	if err == nil {
		fe = &fleetEnv{url: cluster.URL, probe: newPgProbe(cluster.URL, pid), poolSize: c.fleetPool, batch: c.claimBatch,
			count: &counter{}, riverCount: &counter{}, statements: c.fleetStatements}
		fe.env, err = newEnv(ctx, cluster.URL)
	}
	if err == nil && fe.statements {
		err = fe.createStatements(ctx)
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
	if fr.Settings, err = fe.settings(ctx); err != nil {
		return err
	}
	log.Printf("bench: fleet on a private cluster: %s", settingsLine(fr.Settings))
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

// fleetRound measures one round of row: Sluice, River with as many clients, and River with one
// client (when the row has more than one replica) in turn, in the reverse order every other round.
func fleetRound(ctx context.Context, fe *fleetEnv, row *fleetRow, round, n int) error {
	steps := []func() error{
		func() error {
			r, err := sluiceFleet(ctx, fe, row.fleetShape, n)
			row.Sluice = append(row.Sluice, r)
			return err
		},
		func() error {
			r, err := riverFleet(ctx, fe, row.Replicas, n)
			row.River = append(row.River, r)
			return err
		},
	}
	if row.Replicas > 1 {
		steps = append(steps, func() error {
			r, err := riverFleet(ctx, fe, 1, n)
			row.River1 = append(row.River1, r)
			return err
		})
	}
	if round%2 == 1 {
		slices.Reverse(steps)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	s, r := row.Sluice[len(row.Sluice)-1], row.River[len(row.River)-1]
	r1 := ""
	if len(row.River1) > 0 {
		r1 = fmt.Sprintf(", river 1 client %.0f/s", row.River1[len(row.River1)-1].PerSecond)
	}
	log.Printf("bench: round %d: fleet of %d, %s line(s): sluice %.0f/s (%.2f empty claims/ticket, %.1f stmts/ticket, %.0f WAL B/ticket), river %.0f/s (%.0f WAL B/ticket)%s, load %.1f",
		round+1, row.Replicas, row.name(), s.PerSecond, s.EmptyClaimsPerTicket, s.StatementsPerTicket, s.WALPerTicket,
		r.PerSecond, r.WALPerTicket, r1, s.LoadAverage[0])
	return nil
}
