package main

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
)

// pgbenchResult is the machine's ceiling for one-row transactions: pgbench's simple-update script
// (-N) with 8 clients.
type pgbenchResult struct {
	TPS         []float64  `json:"tps_runs"`
	MedianTPS   float64    `json:"median_tps"`
	Seconds     int        `json:"seconds"`
	LoadAverage [3]float64 `json:"load_average"`
	Skipped     string     `json:"skipped,omitempty"`
}

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+)`)

// measurePgbench runs pgbench -N -c 8 -j 2 in a database of its own, once per round.
func measurePgbench(ctx context.Context, e *env, c config, res *results) error {
	res.Pgbench = &pgbenchResult{Seconds: c.pgbenchFor}
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		res.Pgbench.Skipped = "pgbench is not on PATH (Debian: postgresql-contrib or postgresql-client)"
		log.Print("bench: " + res.Pgbench.Skipped)
		return nil
	}
	const db = "sluice_bench_pgbench"
	if _, err := e.pool.Exec(ctx, `DROP DATABASE IF EXISTS `+db); err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		return err
	}
	defer func() { _, _ = e.pool.Exec(context.Background(), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`) }()
	u, err := url.Parse(e.url)
	if err != nil {
		return err
	}
	u.Path = "/" + db
	target := u.String()
	if out, err := exec.CommandContext(ctx, bin, "-i", "-q", "-s", "10", target).CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %v: %s", err, out)
	}
	for range c.rounds {
		out, err := exec.CommandContext(ctx, bin, "-N", "-n", "-c", "8", "-j", "2", "-T", strconv.Itoa(res.Pgbench.Seconds), target).CombinedOutput()
		if err != nil {
			return fmt.Errorf("pgbench: %v: %s", err, out)
		}
		m := tpsRE.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("pgbench printed no tps: %s", out)
		}
		tps, _ := strconv.ParseFloat(string(m[1]), 64)
		res.Pgbench.TPS = append(res.Pgbench.TPS, tps)
		log.Printf("bench: pgbench simple-update: %.0f tx/s", tps)
	}
	res.Pgbench.MedianTPS = median(res.Pgbench.TPS, func(x float64) float64 { return x })
	res.Pgbench.LoadAverage = loadAvg()
	return nil
}
