package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// connSampleEvery is how often the connection sampler counts the fleet's connections.
const connSampleEvery = 150 * time.Millisecond

// pgProbe watches the private cluster while a fleet runs: its connections and its CPU time.
type pgProbe struct {
	url        string
	postmaster int     // the private cluster's postmaster PID
	clkTck     float64 // clock ticks per second of /proc/<pid>/stat's times
}

// newPgProbe returns a probe of the cluster at url whose postmaster is pid.
func newPgProbe(url string, pid int) *pgProbe {
	p := &pgProbe{url: url, postmaster: pid, clkTck: 100}
	if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
		if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
			p.clkTck = v
		}
	}
	return p
}

// connections is the most connections of the application app seen by the sampler: all of them, and
// those not idle (running a statement, or idle in a transaction).
type connections struct{ All, Busy int }

// sampleConnections counts, every connSampleEvery until the returned function is called, the
// client backends of pg_stat_activity whose application_name is app (the fleet's pools set it), or
// every client backend when app is "", over a connection of its own, which is not counted. The function returns the maxima.
func (p *pgProbe) sampleConnections(ctx context.Context, app string) (func() connections, error) {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	var most connections
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() { _ = conn.Close(context.WithoutCancel(sctx)) }()
		tick := time.NewTicker(connSampleEvery)
		defer tick.Stop()
		for {
			var c connections
			err := conn.QueryRow(sctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'idle')
				FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
				AND ($1 = '' OR application_name = $1)`, app).Scan(&c.All, &c.Busy)
			if err == nil {
				most.All, most.Busy = max(most.All, c.All), max(most.Busy, c.Busy)
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() connections { stop(); wg.Wait(); return most }, nil
}

// cpuSeconds returns the CPU time, user and system, the private cluster has used so far: the
// postmaster's own utime+stime, its cutime+cstime (the backends that have exited and been reaped:
// the kernel adds a child's times to its parent's when the parent waits for it), and utime+stime of
// every live process whose parent is the postmaster (backends, the listener connections, the
// checkpointer, autovacuum, ...). A backend that has exited but is not yet reaped is a zombie whose
// stat still holds its times, so each process is counted exactly once at any instant. The times are
// in clock ticks (getconf CLK_TCK, usually 100 per second). Only the private cluster is counted:
// the machine's shared Postgres, which other work loads, has a different postmaster.
func (p *pgProbe) cpuSeconds() (float64, error) {
	f, err := procStat(p.postmaster)
	if err != nil {
		return 0, fmt.Errorf("postmaster %d: %w", p.postmaster, err)
	}
	ticks := f[11] + f[12] + f[13] + f[14] // utime, stime, cutime, cstime: fields 14-17
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == p.postmaster {
			continue
		}
		g, err := procStat(pid)
		if err != nil || int(g[1]) != p.postmaster { // gone since the glob, or not a child: field 4, ppid
			continue
		}
		ticks += g[11] + g[12]
	}
	return ticks / p.clkTck, nil
}

// procStat returns the numeric fields of /proc/<pid>/stat from field 3 (state, as 0) on, indexed
// from field 3: f[i] is field i+3. The command name (field 2) may hold spaces and parentheses, so
// the fields are read after its last ')'.
func procStat(pid int) ([]float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	f := make([]float64, len(fields))
	for j, x := range fields[1:] {
		f[j+1], _ = strconv.ParseFloat(x, 64)
	}
	return f, nil
}

// querier is what fleetUnfinished reads through: a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// fleetUnfinished returns how many tickets of schema are not finished, by state.
func fleetUnfinished(ctx context.Context, db querier, schema string) (map[string]int, error) {
	var states []string
	var counts []int
	err := db.QueryRow(ctx, `SELECT coalesce(array_agg(state::text), '{}'), coalesce(array_agg(n), '{}') FROM (
		SELECT state, count(*) AS n FROM `+pgx.Identifier{schema}.Sanitize()+`.sluice_ticket
		WHERE state <> 'finished' GROUP BY state) s`).Scan(&states, &counts)
	if err != nil {
		return nil, err
	}
	m := make(map[string]int, len(states))
	for i, s := range states {
		m[s] = counts[i]
	}
	return m, nil
}

// percentiles returns the 50th and 99th percentiles of xs (nearest rank), 0 for none.
func percentiles(xs []float64) (p50, p99 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return at(0.5), at(0.99)
}
