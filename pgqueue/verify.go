package pgqueue

import (
	"context"
	"fmt"
)

// Verify checks the queue's invariants and returns a description of each violation (none when
// healthy): every limit's in-flight figures equal the sum over the tickets holding it, no limit holds
// more than MaxConcurrent or MaxInflightTokens (an oversize ticket alone excepted), and every ticket
// is in a known state. Tests run it after every scenario; an operator may run it at any time (it reads
// a consistent snapshot and locks nothing).
func (q *Queue) Verify(ctx context.Context) ([]string, error) {
	var problems []string
	rows, err := q.pool.Query(ctx, q.s(`WITH held AS (
			SELECT k AS key, count(*) AS n, sum(cost) AS tokens
			FROM {s}.sluice_ticket, unnest(limit_keys) AS k
			WHERE state IN ('admitted', 'running') GROUP BY k)
		SELECT l.key, l.inflight_count - `+pendingCount+`, l.inflight_tokens - `+pendingTokens+`, coalesce(h.n, 0), coalesce(h.tokens, 0),
			l.max_concurrent, l.max_inflight_tokens
		FROM {s}.sluice_limit l LEFT JOIN held h ON h.key = l.key ORDER BY l.key`))
	if err != nil {
		return nil, fmt.Errorf("sluice: verify: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var rowN, rowTok, n, tok, maxN, maxTok int64
		if err := rows.Scan(&key, &rowN, &rowTok, &n, &tok, &maxN, &maxTok); err != nil {
			return nil, err
		}
		if rowN != n || rowTok != tok {
			problems = append(problems, fmt.Sprintf("limit %q: row says %d in flight with %d tokens, tickets say %d with %d", key, rowN, rowTok, n, tok))
		}
		if maxN > 0 && n > maxN {
			problems = append(problems, fmt.Sprintf("limit %q: %d tickets in flight, MaxConcurrent %d", key, n, maxN))
		}
		if maxTok > 0 && tok > maxTok && n > 1 {
			problems = append(problems, fmt.Sprintf("limit %q: %d tokens in flight, MaxInflightTokens %d", key, tok, maxTok))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var orphanLine int64
	if err := q.pool.QueryRow(ctx, q.s(`SELECT count(*) FROM {s}.sluice_ticket t
		WHERE state = 'queued' AND NOT EXISTS (SELECT 1 FROM {s}.sluice_limit l WHERE l.key = t.line_key)`)).Scan(&orphanLine); err != nil {
		return nil, err
	}
	if orphanLine > 0 {
		problems = append(problems, fmt.Sprintf("%d queued tickets wait in the line of a limit that does not exist", orphanLine))
	}
	return problems, nil
}
