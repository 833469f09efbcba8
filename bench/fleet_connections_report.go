package main

import (
	"fmt"
	"strings"
)

// connectionsResult is the connections figure: its runs, or why it (or its pooled shapes) was skipped.
type connectionsResult struct {
	Skipped        string `json:"skipped,omitempty"`
	BouncerSkipped string `json:"pgbouncer_skipped,omitempty"`
	Tickets        int    `json:"tickets_per_run"`
	// MaxConnections is the private cluster's max_connections; PoolSize each replica's pool;
	// BouncerPoolSize PgBouncer's default_pool_size in the pooled shapes.
	MaxConnections  int `json:"private_cluster_max_connections"`
	PoolSize        int `json:"pool_size"`
	BouncerPoolSize int `json:"pgbouncer_pool_size"`
	// Settings is the private cluster's durability settings and version, read by SHOW at the start.
	Settings map[string]string `json:"cluster_settings,omitempty"`
	Runs     []connRun         `json:"runs,omitempty"`
}

// connRun is one run of the connections figure.
type connRun struct {
	connShape
	// River says the run is River's (connRiverPooled): it has no lines, admission latency, Verify
	// or retried statements.
	River     bool `json:"river,omitempty"`
	Written   int  `json:"written"`
	Completed int  `json:"completed"` // each exactly once: a second completion would fail the run
	// Left is the tickets not finished, by state; Verify the queue's invariants violated after the run.
	Left       map[string]int `json:"left,omitempty"`
	Verify     []string       `json:"verify,omitempty"`
	PerSecond  float64        `json:"per_second"` // tickets completed per second of the run
	Seconds    float64        `json:"seconds"`
	AdmitP50Ms float64        `json:"admit_p50_ms"`
	AdmitP99Ms float64        `json:"admit_p99_ms"`
	// Connections is the most client backends of the private cluster seen at once (the sampler's
	// own excepted): the fleet's, PgBouncer's and the setup pool's.
	Connections int `json:"max_connections"`
	// Failed is the statements (claim, take, complete) and listener connections (listen) that failed
	// and were tried again; TooMany those of them refused with SQLSTATE 53300.
	Failed      map[string]int `json:"failed,omitempty"`
	TooMany     int            `json:"too_many_clients"`
	Errors      []string       `json:"errors,omitempty"`
	LoadAverage [3]float64     `json:"load_average"`
}

// fill writes the measured run and the replicas' counts into r.
func (r *connRun) fill(m connMeasured, t *fleetTally) {
	r.Completed = int(t.done.Load())
	r.Seconds, r.Connections, r.LoadAverage = m.Seconds, m.Connections, m.LoadAverage
	if m.Seconds > 0 {
		r.PerSecond = float64(r.Completed) / m.Seconds
	}
	st := &t.stats
	r.Failed = map[string]int{}
	for kind, n := range map[string]int64{"claim": st.failedClaims.Load(), "take": st.failedTakes.Load(),
		"complete": st.failedCompletes.Load(), "listen": st.failedListens.Load()} {
		if n > 0 {
			r.Failed[kind] = int(n)
		}
	}
	r.TooMany, r.Errors = int(st.tooMany.Load()), t.errs
}

// clean reports whether the run did all it must: every ticket completed, none left, Verify clean.
func (r *connRun) clean() bool {
	return r.Completed == r.Written && len(r.Left) == 0 && len(r.Verify) == 0
}

// shapeTitle is how the table names a shape.
func shapeTitle(name string) string {
	switch name {
	case connDirect:
		return "direct, pool + listener each"
	case connDirectIdle:
		return "direct, idle pool connections closed after 500 ms"
	case connPooledPolling:
		return "PgBouncer, polling (200 ms)"
	case connPooledListen:
		return "PgBouncer, listeners direct"
	case connRiverPooled:
		return "River: PgBouncer, PollOnly, benchmark settings (fetch poll 20 ms)"
	case connRiverPooledDefaults:
		return "River: PgBouncer, PollOnly, defaults (fetch poll 1 s)"
	}
	return name
}

// markdown renders the connections figure's table, and the errors the replicas survived.
func (f *connectionsResult) markdown() string {
	var b strings.Builder
	if f.Skipped != "" {
		fmt.Fprintf(&b, "Connections: skipped: %s\n\n", f.Skipped)
		return b.String()
	}
	fmt.Fprintf(&b, "Connections: %d tickets per run, written beforehand; a private cluster of max_connections %d (%s); "+
		"each replica a pool of %d; PgBouncer 1.18 in transaction mode, default_pool_size %d.\n\n",
		f.Tickets, f.MaxConnections, settingsLine(f.Settings), f.PoolSize, f.BouncerPoolSize)
	if f.BouncerSkipped != "" {
		fmt.Fprintf(&b, "PgBouncer shapes skipped: %s\n\n", f.BouncerSkipped)
	}
	b.WriteString("| shape | replicas | lines | completed of written | left | Verify | /s | admission p50 / p99 ms | " +
		"max PG connections | failed: claim / take / complete / listen (of them 53300) | load 1 min |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	var errs []string
	for _, r := range f.Runs {
		if r.River {
			done := fmt.Sprintf("%d / %d", r.Completed, r.Written)
			if r.Completed != r.Written {
				done = "**" + done + "**"
			}
			fmt.Fprintf(&b, "| %s | %d | - | %s | - | - | %.0f | - | %d | - | %.1f |\n",
				shapeTitle(r.Name), r.Replicas, done, r.PerSecond, r.Connections, r.LoadAverage[0])
			continue
		}
		verify := "clean"
		if len(r.Verify) > 0 {
			verify = fmt.Sprintf("**%d problems**", len(r.Verify))
		}
		left := "none"
		if len(r.Left) > 0 {
			left = fmt.Sprint(r.Left)
		}
		done := fmt.Sprintf("%d / %d", r.Completed, r.Written)
		if !r.clean() {
			done = "**" + done + "**"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %.0f | %.0f / %.0f | %d | %d / %d / %d / %d (%d) | %.1f |\n",
			shapeTitle(r.Name), r.Replicas, r.Lines, done, left, verify, r.PerSecond, r.AdmitP50Ms, r.AdmitP99Ms,
			r.Connections, r.Failed["claim"], r.Failed["take"], r.Failed["complete"], r.Failed["listen"], r.TooMany,
			r.LoadAverage[0])
		for _, e := range r.Errors {
			errs = append(errs, fmt.Sprintf("- %s, %d lines: %s", r.Name, r.Lines, e))
		}
	}
	b.WriteString("\n")
	if len(errs) > 0 {
		b.WriteString("Errors the replicas survived (first distinct ones):\n\n" + strings.Join(errs, "\n") + "\n\n")
	}
	return b.String()
}
