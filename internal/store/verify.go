package store

import (
	"context"
	"fmt"
)

// Verify checks the queue's invariants and returns a description of each violation (none when
// healthy): every limit's in-flight figures equal the sum over the tickets holding it, no limit holds
// more than MaxConcurrent or MaxInflightTokens (an oversize ticket, alone or beside tickets of no
// cost, excepted; tickets admitted before the limit's configuration last changed are not held to the
// new caps), no unfinished ticket names a limit that does not exist, and every ticket is in a known
// state. Tests run it after every scenario; an operator may run it at any time (it locks nothing).
func (q *Queue) Verify(ctx context.Context) ([]string, error) {
	var problems []string
	// A cap lowered while tickets ran is exceeded by them until they end, and that is no
	// over-admission: the caps are checked against the tickets admitted after the limit's
	// configuration last changed (its history's latest record), which admission held to it.
	rows, err := q.pool.Query(ctx, q.s(`WITH changed AS (
			SELECT key, max(at) AS at FROM {s}.sluice_limit_change WHERE kind IN ('created', 'configured') GROUP BY key
		), held AS (
			SELECT k AS key, count(*) AS n, sum(t.cost) AS tokens,
				count(*) FILTER (WHERE t.admitted_at > coalesce(c.at, '-infinity')) AS n_since,
				count(*) FILTER (WHERE t.admitted_at > coalesce(c.at, '-infinity') AND t.cost > 0) AS costly_since,
				coalesce(sum(t.cost) FILTER (WHERE t.admitted_at > coalesce(c.at, '-infinity')), 0) AS tokens_since
			FROM {s}.sluice_ticket t CROSS JOIN unnest(t.limit_keys) AS k LEFT JOIN changed c ON c.key = k
			WHERE t.state IN ('admitted', 'running') GROUP BY k)
		SELECT l.key, l.inflight_count - `+pendingCount+`, l.inflight_tokens - `+pendingTokens+`, coalesce(h.n, 0), coalesce(h.tokens, 0),
			coalesce(h.n_since, 0), coalesce(h.costly_since, 0), coalesce(h.tokens_since, 0), l.max_concurrent, l.max_inflight_tokens
		FROM {s}.sluice_limit l LEFT JOIN held h ON h.key = l.key ORDER BY l.key`))
	if err != nil {
		return nil, fmt.Errorf("sluice: verify: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var rowN, rowTok, n, tok, nSince, costlySince, tokSince, maxN, maxTok int64
		if err := rows.Scan(&key, &rowN, &rowTok, &n, &tok, &nSince, &costlySince, &tokSince, &maxN, &maxTok); err != nil {
			return nil, err
		}
		if rowN != n || rowTok != tok {
			problems = append(problems, fmt.Sprintf("limit %q: row says %d in flight with %d tokens, tickets say %d with %d", key, rowN, rowTok, n, tok))
		}
		if maxN > 0 && nSince > maxN {
			problems = append(problems, fmt.Sprintf("limit %q: %d tickets in flight, MaxConcurrent %d", key, nSince, maxN))
		}
		// An oversize ticket is admitted when no tokens are in flight: beside tickets of no cost.
		if maxTok > 0 && tokSince > maxTok && costlySince > 1 {
			problems = append(problems, fmt.Sprintf("limit %q: %d tokens in flight, MaxInflightTokens %d", key, tokSince, maxTok))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// A ticket that names a limit with no row would wait forever, or hold what nothing releases:
	// DeleteLimit refuses a key in use, and enqueue locks the rows it names against it.
	orphans, err := q.pool.Query(ctx, q.s(`SELECT k, count(*) FROM {s}.sluice_ticket t CROSS JOIN unnest(t.limit_keys) AS k
		WHERE t.state IN `+unfinishedStates+` AND NOT EXISTS (SELECT 1 FROM {s}.sluice_limit l WHERE l.key = k)
		GROUP BY k ORDER BY k`))
	if err != nil {
		return nil, fmt.Errorf("sluice: verify: %w", err)
	}
	defer orphans.Close()
	for orphans.Next() {
		var key string
		var n int64
		if err := orphans.Scan(&key, &n); err != nil {
			return nil, err
		}
		problems = append(problems, fmt.Sprintf("%d unfinished tickets name limit %q, which does not exist", n, key))
	}
	if err := orphans.Err(); err != nil {
		return nil, err
	}
	return problems, nil
}
