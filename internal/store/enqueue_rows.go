package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
)

// enqueueSQL writes a batch of tickets in one statement. It takes the tickets as parallel arrays ($1
// to $17, $23 and $24, one element per ticket, ord numbering them from 0) and their limit keys flattened
// ($18 the ticket's ord, $19 the key, in order); $20 is the instant, $21 and $22 the notification ($21
// empty for none: EnqueueClaiming notifies only the lines it leaves work in). Step by step:
//   - locked, keys: each ticket's limit keys, and whether every one exists. A ticket naming an unknown
//     limit is not written; the caller learns which from the ords returned. The rows are locked FOR KEY
//     SHARE, as a foreign key's check does, so that DeleteLimit (FOR UPDATE, then DELETE) cannot remove
//     a row between this statement's read and its commit, which would leave the ticket waiting in no
//     line forever. KEY SHARE conflicts with nothing else: every other lock on sluice_limit is FOR NO
//     KEY UPDATE (claims, releases, changes) and updates never change the key, so enqueues and claims
//     never wait for each other. A row a committed DeleteLimit removed after this statement's snapshot
//     is skipped by the lock (READ COMMITTED re-checks the row's latest version), and the ticket is
//     refused as naming an unknown limit; the joins below read the snapshot's rows for vtime only,
//     behind known.
//   - prev, inherited: a retry of an attempt that was handed back takes its place in line (the earlier
//     ticket is deleted).
//   - fresh, groups, fair: a ticket with a fairness key gets its fair-share tags from its key's finish
//     tag, advanced once per (line, key) for the whole batch. The upsert locks each sluice_fair row and
//     reads its latest finish, so concurrent batches on one key queue behind each other and never
//     reuse a tag. Rows are upserted in key order, so that two batches cannot deadlock. The rule is
//     admit.FairTag, applied ticket after ticket in the order given; the SQL applies it to the
//     whole batch at once (a sum per key, a running sum per ticket), and
//     TestQueue_EnqueueFairTagsMatchThrottle checks the two agree on random batches.
//   - rows: the place of each ticket: inherited, fair, or the line's virtual time; a sequence number
//     in the order given (a volatile target list is evaluated after the ORDER BY).
//   - ins, woken: the insert, and one notification per line.
const enqueueSQL = `WITH input AS (
	SELECT * FROM unnest($1::int[], $2::bigint[], $3::int[], $4::text[], $5::float8[], $6::text[], $7::text[],
		$8::text[], $9::text[], $10::text[], $11::text[], $12::int[], $13::bytea[], $14::timestamptz[],
		$15::timestamptz[], $16::text[], $17::text[], $23::bigint[], $24::bigint[])
		AS i(ord, cost, priority, fairness_key, inc, owner, namespace, workflow_id, run_id, activity_id,
			activity_type, attempt, task_token, deadline, not_before, trace_context, line_key, output_cost, cost_money)
), locked AS (
	SELECT key FROM {s}.sluice_limit WHERE key = ANY($19::text[]) FOR KEY SHARE
), keys AS (
	SELECT x.ord, array_agg(x.key ORDER BY x.n) AS limit_keys, bool_and(l.key IS NOT NULL) AS known
	FROM unnest($18::int[], $19::text[]) WITH ORDINALITY AS x(ord, key, n)
	LEFT JOIN locked l ON l.key = x.key
	GROUP BY x.ord
), prev AS (
	DELETE FROM {s}.sluice_ticket t USING input i, keys k
	WHERE k.ord = i.ord AND k.known AND i.activity_id <> '' AND i.attempt > 1
		AND t.namespace = i.namespace AND t.workflow_id = i.workflow_id AND t.run_id = i.run_id
		AND t.activity_id = i.activity_id AND t.attempt < i.attempt AND t.line_key = i.line_key
		AND t.state IN ('returned', 'queued')
	RETURNING i.ord, t.priority, t.vstart, t.seq
), inherited AS (
	SELECT DISTINCT ON (ord) ord, priority, vstart, seq FROM prev ORDER BY ord, priority, vstart, seq
), fresh AS (
	SELECT i.ord, i.line_key, i.fairness_key, i.inc,
		sum(i.inc) OVER (PARTITION BY i.line_key, i.fairness_key ORDER BY i.ord) AS upto
	FROM input i JOIN keys k ON k.ord = i.ord
	WHERE k.known AND i.fairness_key <> '' AND NOT EXISTS (SELECT 1 FROM inherited h WHERE h.ord = i.ord)
), groups AS (
	SELECT line_key, fairness_key, sum(inc) AS total FROM fresh GROUP BY line_key, fairness_key
), fair AS (
	INSERT INTO {s}.sluice_fair AS f (line_key, fairness_key, finish)
	SELECT g.line_key, g.fairness_key, l.vtime + g.total
	FROM groups g JOIN {s}.sluice_limit l ON l.key = g.line_key
	ORDER BY g.line_key, g.fairness_key
	ON CONFLICT (line_key, fairness_key) DO UPDATE
		SET finish = greatest(f.finish, (SELECT vtime FROM {s}.sluice_limit WHERE key = excluded.line_key))
			+ (SELECT g.total FROM groups g WHERE g.line_key = excluded.line_key AND g.fairness_key = excluded.fairness_key),
			updated_at = now()
	RETURNING f.line_key, f.fairness_key, f.finish
), rows AS (
	SELECT i.*, k.limit_keys,
		coalesce(h.priority, i.priority) AS place_priority,
		coalesce(h.vstart, fa.finish - g.total + fr.upto - fr.inc, l.vtime) AS place_start,
		coalesce(h.seq, nextval('{s}.sluice_ticket_seq')) AS place_seq
	FROM input i
	JOIN keys k ON k.ord = i.ord AND k.known
	JOIN {s}.sluice_limit l ON l.key = i.line_key
	LEFT JOIN inherited h ON h.ord = i.ord
	LEFT JOIN fresh fr ON fr.ord = i.ord
	LEFT JOIN groups g ON g.line_key = fr.line_key AND g.fairness_key = fr.fairness_key
	LEFT JOIN fair fa ON fa.line_key = fr.line_key AND fa.fairness_key = fr.fairness_key
	ORDER BY i.ord
), ins AS (
	INSERT INTO {s}.sluice_ticket (state, line_key, limit_keys, cost, output_cost, cost_money, priority, fairness_key, vstart, seq,
		owner, namespace, workflow_id, run_id, activity_id, activity_type, attempt, task_token, deadline,
		not_before, enqueued_at, trace_context)
	SELECT 'queued', line_key, limit_keys, cost, output_cost, cost_money, place_priority, fairness_key, place_start, place_seq,
		owner, namespace, workflow_id, run_id, activity_id, activity_type, attempt, task_token, deadline,
		coalesce(not_before, '-infinity'), coalesce($20::timestamptz, clock_timestamp()), nullif(trace_context, '')
	FROM rows ORDER BY ord
	RETURNING *
), woken AS (
	SELECT count(pg_notify($21, $22 || line_key)) AS n FROM (SELECT DISTINCT line_key FROM ins WHERE $21 <> '') w
)
SELECT r.ord, t.* FROM (SELECT ` + ticketColumns + ` FROM ins) t JOIN rows r ON r.place_seq = t.seq, woken`

// enqueueRows writes the valid tickets ps in tx, in one statement, and returns those written by
// their index in ps: a ticket is missing when it names a limit that does not exist. notify wakes the
// claimers of their lines at the commit.
func (q *Queue) enqueueRows(ctx context.Context, tx querier, ps []EnqueueParams, notify bool) (map[int]Ticket, error) {
	sql, args := q.enqueueStatement(ps, notify)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return scanWritten(rows, len(ps))
}

// enqueueStatement is the statement that writes the valid tickets ps, and its arguments (see
// enqueueRows).
func (q *Queue) enqueueStatement(ps []EnqueueParams, notify bool) (string, []any) {
	n := len(ps)
	var (
		ords, priorities, attempts                                       = make([]int32, n), make([]int32, n), make([]int32, n)
		costs, outputs, money                                            = make([]int64, n), make([]int64, n), make([]int64, n)
		incs                                                             = make([]float64, n)
		fairness, owners, namespaces, workflows, runs, activities, types = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		traces, lines                                                    = make([]string, n), make([]string, n)
		tokens                                                           = make([][]byte, n)
		deadlines, notBefores                                            = make([]*time.Time, n), make([]*time.Time, n)
		keyOrds                                                          []int32
		keys                                                             []string
	)
	for i, p := range ps {
		ords[i], costs[i], outputs[i], priorities[i], fairness[i] = int32(i), p.Cost, p.OutputCost, int32(p.Priority), p.FairnessKey
		incs[i] = admit.FairIncrement(p.Cost, p.Weight)
		owners[i], namespaces[i], workflows[i], runs[i] = p.Owner, p.Namespace, p.WorkflowID, p.RunID
		activities[i], types[i], attempts[i], tokens[i] = p.ActivityID, p.ActivityType, int32(p.Attempt), p.TaskToken
		traces[i], lines[i], money[i] = p.TraceContext, p.LimitKeys[0], p.CostMoney
		deadlines[i], notBefores[i] = timeOrNil(p.Deadline), timeOrNil(p.NotBefore)
		for _, k := range p.LimitKeys {
			keyOrds, keys = append(keyOrds, int32(i)), append(keys, k)
		}
	}
	channel := NotifyChannel
	if !notify {
		channel = ""
	}
	return q.s(enqueueSQL), []any{ords, costs, priorities, fairness, incs, owners, namespaces,
		workflows, runs, activities, types, attempts, tokens, deadlines, notBefores, traces, lines, keyOrds, keys,
		q.nowArg(), channel, q.opts.Schema + "|" + kindWork + "|", outputs, money}
}

// scanWritten reads the rows of enqueueSQL: the tickets written, by their index among the n given.
func scanWritten(rows pgx.Rows, n int) (map[int]Ticket, error) {
	defer rows.Close()
	written := make(map[int]Ticket, n)
	for rows.Next() {
		var ord int32
		t, err := scanTicket(prefixed{rows, []any{&ord}})
		if err != nil {
			return nil, err
		}
		written[int(ord)] = t
	}
	return written, rows.Err()
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// prefixed scans its first columns into pre, and the rest into what Scan is given.
type prefixed struct {
	pgx.Row
	pre []any
}

func (r prefixed) Scan(dst ...any) error { return r.Row.Scan(append(r.pre, dst...)...) }
