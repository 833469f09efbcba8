package main

import (
	"context"
	"fmt"
	"strings"
)

// clusterSettings are the private cluster's settings the figures depend on, read at the start of a
// figure with SHOW and written into its results.
var clusterSettings = []string{"fsync", "synchronous_commit", "full_page_writes", "wal_level", "max_connections", "server_version"}

// settings reads clusterSettings from the private cluster.
func (fe *fleetEnv) settings(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range clusterSettings {
		var v string
		if err := fe.env.pool.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			return nil, fmt.Errorf("SHOW %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// settingsLine renders settings as the figures' tables introduce them.
func settingsLine(s map[string]string) string {
	if len(s) == 0 {
		return "settings not read"
	}
	var parts []string
	for _, name := range clusterSettings {
		if v, ok := s[name]; ok {
			parts = append(parts, name+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// checkpoint forces a checkpoint before a run is set up, outside its measurement: the timed
// checkpoint (checkpoint_timeout, 5 minutes by default) then falls in no run shorter than that, so
// neither queue pays for the other's dirty pages, and a run's WAL holds full-page images only of the
// pages that existed before it (its schema is new: few).
func (fe *fleetEnv) checkpoint(ctx context.Context) error {
	_, err := fe.env.pool.Exec(ctx, "CHECKPOINT")
	return err
}

// walLSN returns the private cluster's WAL write position, pg_current_wal_lsn(). Only the benchmark
// writes on the cluster, so the bytes between two positions are a run's (with whatever autovacuum
// did meanwhile on its tables).
func (fe *fleetEnv) walLSN(ctx context.Context) (string, error) {
	var lsn string
	err := fe.env.pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn, err
}

// walSince returns the WAL bytes written since the position from, by pg_wal_lsn_diff.
func (fe *fleetEnv) walSince(ctx context.Context, from string) (float64, error) {
	var bytes float64
	err := fe.env.pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", from).Scan(&bytes)
	return bytes, err
}

// walOf runs write (a queue's fill of n tickets) and returns the WAL bytes it wrote per ticket.
func (fe *fleetEnv) walOf(ctx context.Context, n int, write func() error) (float64, error) {
	from, err := fe.walLSN(ctx)
	if err != nil {
		return 0, err
	}
	if err := write(); err != nil {
		return 0, err
	}
	b, err := fe.walSince(ctx, from)
	return b / float64(n), err
}
