package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// KeyStatus is how one limit stands, for operators: its configuration, what admission applies, its
// tickets, its line's head and what it admitted over the last minute. It is read in one statement
// that locks nothing. It is a plain value; its JSON names (configured, effective, state, queued, ...)
// are what the sluice command's status --json and the dashboard's api/status serve.
type KeyStatus struct {
	// LimitStatus is the limit as configured and as admission applies it, with its state. Its
	// fields stand at the top of the JSON object.
	LimitStatus
	// Queued counts the tickets waiting in the key's line.
	Queued int64 `json:"queued"`
	// Admitted and Running count the tickets holding the key: admitted and not yet taken by their
	// worker, and running.
	Admitted int64 `json:"admitted"`
	Running  int64 `json:"running"`
	// QueuedDrawing counts the tickets waiting in any line that draw on the key (a tenant's cap is
	// drawn on by tickets in the provider's line): Queued and more.
	QueuedDrawing int64 `json:"queued_drawing"`
	// OldestQueued is when the oldest of the 1,000 tickets at the head of the line was written (the
	// whole line's oldest unless priorities put older tickets further back); zero when none waits,
	// and then left out of the JSON. OldestWait is how long it has waited.
	OldestQueued time.Time `json:"oldest_queued,omitzero"`
	// HeadWaitReason is why the ticket at the head of the line last waited ("concurrency", "rate",
	// "tokens", "input_tokens", "output_tokens", "inflight_tokens", "paused"; "concurrency of
	// tenant:acme" when another limit of the ticket held it, Ticket.WaitReason); empty when none waits
	// or no claim has looked at it yet.
	HeadWaitReason string `json:"head_wait_reason"`
	// RequestsLastMinute and TokensLastMinute are what the key admitted over the minute before Now:
	// tickets, and the tokens they reserved less what reported usage gave back.
	RequestsLastMinute int64 `json:"requests_last_minute"`
	TokensLastMinute   int64 `json:"tokens_last_minute"`
	// InputTokensLastMinute and OutputTokensLastMinute are TokensLastMinute's input and output parts.
	InputTokensLastMinute  int64 `json:"input_tokens_last_minute"`
	OutputTokensLastMinute int64 `json:"output_tokens_last_minute"`
	// Now is the database's clock when the status was read: State.PausedUntil after it is a pause
	// still on.
	Now time.Time `json:"now"`
}

// statusColumns follow limitReadColumns in Status's statement; $2 is the instant a minute ago. The
// tickets holding keys are counted once for every key (held), not by a scan per key.
const statusColumns = `,
	(SELECT count(*) FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued'),
	coalesce(h.admitted, 0), coalesce(h.running, 0), coalesce(h.drawing, 0),
	(SELECT min(head.enqueued_at) FROM (SELECT t.enqueued_at FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued'
		ORDER BY t.priority, t.vstart, t.seq LIMIT ` + statusOldestAmong + `) head),
	(SELECT coalesce(t.wait_reason, '') FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued'
		ORDER BY t.priority, t.vstart, t.seq LIMIT 1),
	u.requests, u.tokens, u.input_tokens, u.output_tokens`

// statusUsage sums the usage history of the row aliased l over the minute after $2, joined LATERAL.
const statusUsage = ` CROSS JOIN LATERAL (SELECT coalesce(sum(u.requests), 0)::bigint AS requests,
	coalesce(sum(u.tokens), 0)::bigint AS tokens, coalesce(sum(u.input_tokens), 0)::bigint AS input_tokens,
	coalesce(sum(u.output_tokens), 0)::bigint AS output_tokens
	FROM {s}.sluice_usage u WHERE u.key = l.key AND u.second > $2) u`

// statusOldestAmong bounds the tickets OldestQueued looks at: those at the head of the line, read in
// the line index's order. The minimum over a whole line of a million reads a million rows.
const statusOldestAmong = "1000"

// statusHeld counts the tickets holding each key, admitted and running, and those queued anywhere that
// draw on it, in one pass over the live tickets rather than a scan per key.
const statusHeld = `WITH held AS (
	SELECT k AS held_key, count(*) FILTER (WHERE t.state = 'admitted') AS admitted, count(*) FILTER (WHERE t.state = 'running') AS running,
		count(*) FILTER (WHERE t.state = 'queued') AS drawing
	FROM {s}.sluice_ticket t, unnest(t.limit_keys) AS k WHERE t.state IN ('queued', 'admitted', 'running') GROUP BY k)
`

// Status returns the status of keys, in key order, or of every limit when keys is empty. A key that
// does not exist returns an error wrapping ErrUnknownLimit that names it, with the status of the keys
// that do exist. At thousands of keys, StatusPage reads those of a prefix, a page at a time.
func (q *Queue) Status(ctx context.Context, keys ...string) ([]KeyStatus, error) {
	out, err := q.readStatus(ctx, statusHeld+`SELECT `+limitReadColumns+statusColumns+` FROM {s}.sluice_limit l
			LEFT JOIN held h ON h.held_key = l.key`+statusUsage+` WHERE coalesce(cardinality($1::text[]), 0) = 0 OR l.key = ANY($1) ORDER BY l.key`,
		func(now time.Time) []any { return []any{keys, now.Add(-time.Minute)} }, nil)
	if err != nil {
		return nil, fmt.Errorf("sluice: status: %w", err)
	}
	return out, unknownKeys(keys, out, func(s KeyStatus) string { return s.Configured.Key })
}

// readStatus reads the rows of the status statement sql, whose $2 is the instant a minute before the
// clock's now and whose other arguments args gives, then folds in the pending reconciliations. With
// extra, it runs first in the same transaction, given the instant read.
func (q *Queue) readStatus(ctx context.Context, sql string, args func(now time.Time) []any, extra func(tx pgx.Tx) error) ([]KeyStatus, error) {
	var out []KeyStatus
	err := InTx(ctx, q.pool, func(tx pgx.Tx) error {
		out = nil
		now, err := q.now(ctx, tx)
		if err != nil {
			return err
		}
		if extra != nil {
			if err := extra(tx); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, q.s(sql), args(now)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		read, order := map[string]*limitRow{}, []*limitRow{}
		for rows.Next() {
			var s KeyStatus
			var oldest *time.Time
			var reason *string
			r, err := scanLimit(rows, &s.Queued, &s.Admitted, &s.Running, &s.QueuedDrawing, &oldest, &reason, &s.RequestsLastMinute, &s.TokensLastMinute,
				&s.InputTokensLastMinute, &s.OutputTokensLastMinute)
			if err != nil {
				return err
			}
			s.Now = now.UTC()
			read[r.limit.Key], order = r, append(order, r)
			if oldest != nil {
				s.OldestQueued = oldest.UTC()
			}
			if reason != nil {
				s.HeadWaitReason = *reason
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if err := q.foldPendingSpends(ctx, tx, read, now.UTC()); err != nil {
			return err
		}
		for i, r := range order { // the status once the pending reconciliations are folded in
			out[i].LimitStatus = r.status(now.UTC())
		}
		return nil
	})
	return out, err
}

// unknownKeys returns an error wrapping ErrUnknownLimit naming the keys asked for that found no row.
func unknownKeys[T any](asked []string, found []T, key func(T) string) error {
	var missing []string
	for _, k := range asked {
		if !slices.ContainsFunc(found, func(f T) bool { return key(f) == k }) && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrUnknownLimit, missing)
}

// UsagePoint is what a key admitted during one step of a usage series: tickets, and the tokens they
// reserved, in all and by dimension.
type UsagePoint struct {
	At           time.Time `json:"at"` // the step's start
	Requests     int64     `json:"requests"`
	Tokens       int64     `json:"tokens"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
}

// Usage returns, for each of keys, what it admitted per step over the window before the database's
// clock, oldest first, every step present (zero when nothing was admitted), and that clock. The steps
// are aligned to multiples of step since the Unix epoch; the last one is still filling. The table
// keeps an hour of history.
func (q *Queue) Usage(ctx context.Context, keys []string, window, step time.Duration) (map[string][]UsagePoint, time.Time, error) {
	if step < time.Second || window < step || window > 24*time.Hour {
		return nil, time.Time{}, fmt.Errorf("sluice: usage: step %v must be at least 1s and window %v at least the step, at most 24h", step, window)
	}
	now, err := q.readNow(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sluice: usage: %w", err)
	}
	// Steps align on the Unix epoch, as date_bin's do (time.Truncate aligns on year 1).
	n := int(window / step)
	epoch := time.Unix(0, 0).UTC()
	last := epoch.Add(now.Sub(epoch).Truncate(step))
	first := last.Add(-time.Duration(n-1) * step)
	rows, err := q.pool.Query(ctx, q.s(`SELECT key, date_bin($4::interval, second, 'epoch'::timestamptz), sum(requests)::bigint, sum(tokens)::bigint,
			sum(input_tokens)::bigint, sum(output_tokens)::bigint
		FROM {s}.sluice_usage WHERE key = ANY($1) AND second >= $2 AND second <= $3 GROUP BY 1, 2`),
		keys, first, now, step)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sluice: usage: %w", err)
	}
	out := make(map[string][]UsagePoint, len(keys))
	for _, k := range keys {
		ps := make([]UsagePoint, n)
		for i := range ps {
			ps[i].At = first.Add(time.Duration(i) * step)
		}
		out[k] = ps
	}
	for rows.Next() {
		var k string
		var p UsagePoint
		if err := rows.Scan(&k, &p.At, &p.Requests, &p.Tokens, &p.InputTokens, &p.OutputTokens); err != nil {
			rows.Close()
			return nil, time.Time{}, fmt.Errorf("sluice: usage: %w", err)
		}
		if d := p.At.Sub(first); d >= 0 && int(d/step) < n {
			i := int(d / step)
			o := &out[k][i]
			o.Requests, o.Tokens, o.InputTokens, o.OutputTokens = o.Requests+p.Requests, o.Tokens+p.Tokens,
				o.InputTokens+p.InputTokens, o.OutputTokens+p.OutputTokens
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("sluice: usage: %w", err)
	}
	return out, now, nil
}

// readNow is the injected clock, or the database's.
func (q *Queue) readNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := InTx(ctx, q.pool, func(tx pgx.Tx) (err error) {
		now, err = q.now(ctx, tx)
		return err
	})
	return now, err
}

// OldestWait is how long the line's oldest queued ticket has waited at Now; zero when none waits.
func (s KeyStatus) OldestWait() time.Duration {
	if s.OldestQueued.IsZero() {
		return 0
	}
	return s.Now.Sub(s.OldestQueued)
}

// LimitStatus is a limit as configured and as admission applies it now: the part of a KeyStatus that
// comes from the limit's row alone.
type LimitStatus struct {
	// Configured is the limit as set by UpsertLimits or SQL; Effective is it lowered to what the
	// provider's headers taught (sluiceactivity.ReportHeaders).
	Configured throttle.Limit `json:"configured"`
	Effective  throttle.Limit `json:"effective"`
	// State is the admission state: buckets, in-flight figures (net of pending releases), the pause
	// (which may be past).
	State throttle.State `json:"state"`
	// Allowances are how the effective limit's allowances stand: used, remaining and when each
	// resets, pending reconciliations folded in. Left out of the JSON when the limit has none.
	Allowances []AllowanceStatus `json:"allowances,omitempty"`
}

// LimitStatus returns key's configured and effective limit and its admission state: the light read
// of Status, which reads the limit's row and its pending releases and counts no tickets, for what
// reads often (the plugin's gauges). An unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) LimitStatus(ctx context.Context, key string) (LimitStatus, error) {
	ls, err := q.limitStatuses(ctx, q.pool, []string{key})
	if err != nil {
		return LimitStatus{}, fmt.Errorf("sluice: read limit %q: %w", key, err)
	}
	s, ok := ls[key]
	if !ok {
		return LimitStatus{}, fmt.Errorf("%w: %q", ErrUnknownLimit, key)
	}
	return s, nil
}

// limitStates reads the limits of keys that exist, by key, as admission applies them (the effective
// limit) with their states as the next claim will see them: what admit.Explain takes.
func (q *Queue) limitStates(ctx context.Context, db DB, keys []string) (map[string]admit.LimitState, error) {
	statuses, err := q.limitStatuses(ctx, db, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]admit.LimitState, len(statuses))
	for k, s := range statuses {
		out[k] = admit.LimitState{Limit: s.Effective, State: s.State}
	}
	return out, nil
}

// limitStatuses reads the limits of keys that exist, by key, each with its pending releases folded
// into its state: the state as the next claim will see it.
func (q *Queue) limitStatuses(ctx context.Context, db DB, keys []string) (map[string]LimitStatus, error) {
	rows, err := db.Query(ctx, q.s(`SELECT coalesce(p.count, 0)::int, coalesce(p.reserved, 0)::bigint,
			coalesce(p.refund, 0), coalesce(p.refund_output, 0), coalesce($2::timestamptz, clock_timestamp()), `+limitColumns+`
		FROM {s}.sluice_limit l LEFT JOIN (SELECT key AS pending_key, sum(count) AS count, `+satSum("reserved")+` AS reserved,
				sum(refund) AS refund, sum(refund_output) AS refund_output
			FROM {s}.sluice_release WHERE key = ANY($1) GROUP BY key) p ON p.pending_key = l.key
		WHERE l.key = ANY($1)`), keys, q.nowArg())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	read := make(map[string]*limitRow, len(keys))
	var now time.Time
	for rows.Next() {
		var pending throttle.Released
		r, err := scanLimit(prefixed{rows, []any{&pending.Count, &pending.Reserved, &pending.Refund, &pending.RefundOutput, &now}})
		if err != nil {
			return nil, err
		}
		if pending != (throttle.Released{}) {
			r.state = r.limit.ReleaseMany(r.state, now.UTC(), pending)
		}
		read[r.limit.Key] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	now = now.UTC()
	if err := q.foldPendingSpends(ctx, db, read, now); err != nil {
		return nil, err
	}
	out := make(map[string]LimitStatus, len(read))
	for k, r := range read {
		out[k] = r.status(now)
	}
	return out, nil
}

// status is r as operators read it at now.
func (r *limitRow) status(now time.Time) LimitStatus {
	return LimitStatus{Configured: r.configured, Effective: r.limit, State: r.state,
		Allowances: AllowanceStatuses(r.limit, r.state, now)}
}
