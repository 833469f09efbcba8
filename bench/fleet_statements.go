package main

import (
	"context"
	"log"
	"regexp"
	"strings"
)

// statementsConf loads pg_stat_statements into the private cluster, planning times included, for
// -fleet-statements: which statements a run spent the server's time on.
var statementsConf = []string{"shared_preload_libraries = 'pg_stat_statements'",
	"pg_stat_statements.track_planning = on", "pg_stat_statements.max = 1000"}

// statementStat is one statement's share of a run, from pg_stat_statements: its calls, rows, and
// the milliseconds spent planning and executing it, in all.
type statementStat struct {
	Query  string  `json:"query"`
	Calls  int64   `json:"calls"`
	Rows   int64   `json:"rows"`
	PlanMs float64 `json:"plan_ms"`
	ExecMs float64 `json:"exec_ms"`
}

// topStatements is how many statements a run reports.
const topStatements = 8

// createStatements creates the extension in the bench's database.
func (fe *fleetEnv) createStatements(ctx context.Context) error {
	_, err := fe.env.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// resetStatements empties pg_stat_statements at a run's start (with -fleet-statements).
func (fe *fleetEnv) resetStatements(ctx context.Context) error {
	if !fe.statements {
		return nil
	}
	_, err := fe.env.pool.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	return err
}

// readStatements returns the statements the run spent the most server time on, planning and
// executing, BEGIN and COMMIT included (a COMMIT's time is its WAL flush), and logs them.
func (fe *fleetEnv) readStatements(ctx context.Context) []statementStat {
	if !fe.statements {
		return nil
	}
	rows, err := fe.env.pool.Query(ctx, `SELECT query, calls, rows, total_plan_time, total_exec_time
		FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_activity%'
		ORDER BY total_plan_time + total_exec_time DESC LIMIT $1`, topStatements)
	if err != nil {
		log.Printf("bench: pg_stat_statements not read: %v", err)
		return nil
	}
	defer rows.Close()
	var out []statementStat
	for rows.Next() {
		var s statementStat
		if err := rows.Scan(&s.Query, &s.Calls, &s.Rows, &s.PlanMs, &s.ExecMs); err != nil {
			log.Printf("bench: pg_stat_statements not read: %v", err)
			return nil
		}
		s.Query = shortQuery(s.Query)
		out = append(out, s)
	}
	for _, s := range out {
		log.Printf("bench:   statement %6d calls %8d rows plan %8.1f ms exec %8.1f ms  %s", s.Calls, s.Rows, s.PlanMs, s.ExecMs, s.Query)
	}
	return out
}

var spaces = regexp.MustCompile(`\s+`)

// shortQuery is a statement on one line, cut to 140 characters.
func shortQuery(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if len(q) > 140 {
		q = q[:140] + "…"
	}
	return q
}
