package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// limitColumns are read by every statement that decides admissions.
const limitColumns = `key, max_concurrent, requests_per_second, burst, tokens_per_minute, token_burst, max_inflight_tokens,
	input_tokens_per_minute, input_token_burst, output_tokens_per_minute, output_token_burst,
	request_level, request_at, token_level, token_at, input_token_level, input_token_at, output_token_level, output_token_at,
	inflight_count, inflight_tokens, paused_until, vtime,
	coalesce(learned_requests_per_second, 0), coalesce(learned_burst, 0), coalesce(learned_tokens_per_minute, 0),
	coalesce(learned_token_burst, 0), coalesce(learned_input_tokens_per_minute, 0), coalesce(learned_input_token_burst, 0),
	coalesce(learned_output_tokens_per_minute, 0), coalesce(learned_output_token_burst, 0),
	allowances, allowance_state, learned_allowances`

// Pending releases (see foldReleases) of the limit row aliased l: a reader that does not fold them
// subtracts them from the row's in-flight figures (netPending). The tokens' sum saturates, as
// releaseTakeSQL's does.
const (
	pendingCount  = `(SELECT coalesce(sum(r.count), 0)::int FROM {s}.sluice_release r WHERE r.key = l.key)`
	pendingTokens = `(SELECT least(coalesce(sum(r.reserved), 0), 9223372036854775807)::bigint FROM {s}.sluice_release r WHERE r.key = l.key)`
)

// netPending is the in-flight figure column of the limit row aliased l net of pending, what its
// pending releases hold of it: at least 0, as throttle's Limit.ReleaseMany leaves it when the next
// claim folds them in. The readers that net in SQL (Status, StatusPage, Overview) use it;
// LimitStatus folds in Go. TestPendingNettingMatchesThrottle holds them to ReleaseMany. Verify
// subtracts without the floor: a row that pending releases take below 0 is a fault it reports.
func netPending(column, pending string) string {
	return "greatest(l." + column + " - " + pending + ", 0)"
}

// limitReadColumns are limitColumns for a reader of the row aliased l that does not lock it: the
// in-flight figures net of the pending releases (netPending).
var limitReadColumns = strings.Replace(limitColumns, "inflight_count, inflight_tokens",
	netPending("inflight_count", pendingCount)+", "+netPending("inflight_tokens", pendingTokens), 1)

// insertLimitSQL inserts a limit's configuration, given by limitConfigArgs; the caller adds its ON
// CONFLICT clause (limitConfigUpdate to replace the configuration).
const insertLimitSQL = `INSERT INTO {s}.sluice_limit (key, max_concurrent, requests_per_second, burst, tokens_per_minute,
	token_burst, max_inflight_tokens, input_tokens_per_minute, input_token_burst, output_tokens_per_minute, output_token_burst,
	allowances)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`

// limitConfigUpdate replaces a conflicting row's configuration with insertLimitSQL's.
const limitConfigUpdate = `max_concurrent = excluded.max_concurrent,
	requests_per_second = excluded.requests_per_second, burst = excluded.burst,
	tokens_per_minute = excluded.tokens_per_minute, token_burst = excluded.token_burst,
	max_inflight_tokens = excluded.max_inflight_tokens,
	input_tokens_per_minute = excluded.input_tokens_per_minute, input_token_burst = excluded.input_token_burst,
	output_tokens_per_minute = excluded.output_tokens_per_minute, output_token_burst = excluded.output_token_burst,
	allowances = excluded.allowances`

// limitConfigArgs are insertLimitSQL's arguments for l.
func limitConfigArgs(l throttle.Limit) []any {
	return []any{l.Key, l.MaxConcurrent, l.RequestsPerSecond, l.Burst, l.TokensPerMinute, l.TokenBurst, l.MaxInflightTokens,
		l.InputTokensPerMinute, l.InputTokenBurst, l.OutputTokensPerMinute, l.OutputTokenBurst, jsonOrNull(l.Allowances)}
}

// limitRow is a sluice_limit row: configuration and state.
type limitRow struct {
	// configured is the limit as the user set it: the ceiling. limit is what admission applies: the
	// configured limit lowered to what the provider's headers reported, if that is lower.
	configured throttle.Limit
	limit      throttle.Limit
	learned    throttle.Limit // the learned rates; zero fields learned nothing
	state      throttle.State
	vtime      float64
	dirty      bool
	// readStates reports that the row was read with allowance states: a save writes them, even when
	// none is left.
	readStates bool
	// refunded are the tokens the releases folded in by this transaction gave back: reservations
	// that reported usage did not spend (negative: usage above them), in all and of output tokens.
	// Claims record them in the usage history.
	refunded, refundedOutput float64
}

// scanLimit scans limitColumns, then into more, the columns that follow them.
func scanLimit(row pgx.Row, more ...any) (*limitRow, error) {
	var (
		r                             limitRow
		ats                           [4]*time.Time // the buckets', by dimension
		paused                        *time.Time
		allowances, states, learnedAs []byte
	)
	l, s, learned := &r.limit, &r.state, &r.learned
	dst := []any{&l.Key, &l.MaxConcurrent, &l.RequestsPerSecond, &l.Burst,
		&l.TokensPerMinute, &l.TokenBurst, &l.MaxInflightTokens,
		&l.InputTokensPerMinute, &l.InputTokenBurst, &l.OutputTokensPerMinute, &l.OutputTokenBurst}
	// The buckets' columns are in the dimensions' order: request_level, request_at, token_level, ...
	for d := range l.Rates() {
		dst = append(dst, &s.Bucket(d).Level, &ats[d])
	}
	err := row.Scan(append(append(dst, &s.InflightCount, &s.InflightTokens, &paused, &r.vtime,
		&learned.RequestsPerSecond, &learned.Burst, &learned.TokensPerMinute, &learned.TokenBurst,
		&learned.InputTokensPerMinute, &learned.InputTokenBurst, &learned.OutputTokensPerMinute, &learned.OutputTokenBurst,
		&allowances, &states, &learnedAs), more...)...)
	if err != nil {
		return nil, err
	}
	for _, j := range []struct {
		src []byte
		dst any
	}{{allowances, &l.Allowances}, {states, &s.Allowances}, {learnedAs, &learned.Allowances}} {
		if j.src != nil {
			if err := json.Unmarshal(j.src, j.dst); err != nil {
				return nil, fmt.Errorf("limit %q: allowances: %w", l.Key, err)
			}
		}
	}
	r.readStates = states != nil
	r.configured = r.limit.WithDefaults()
	r.limit = throttle.EffectiveLimit(r.configured, r.learned)
	for d := range l.Rates() {
		if ats[d] != nil {
			s.Bucket(d).At = ats[d].UTC()
		}
	}
	if paused != nil {
		s.PausedUntil = paused.UTC()
	}
	return &r, nil
}

// saveLimits writes back the state of every dirty row, in one statement.
func (q *Queue) saveLimits(ctx context.Context, tx pgx.Tx, rows map[string]*limitRow) error {
	args := limitStateArgs(rows)
	if len(args[0].([]string)) == 0 {
		return nil
	}
	if !anyAllowances(rows) {
		_, err := tx.Exec(ctx, q.s(saveLimitsSQL), args...)
		return err
	}
	_, err := tx.Exec(ctx, q.s(saveLimitsWithStates(limitStateParams+1)), append(args, allowanceStateArgs(rows))...)
	return err
}

// saveLimitsSQL writes the limit state given by limitStateArgs as $1 to $13.
const saveLimitsSQL = `UPDATE {s}.sluice_limit l SET
	request_level = u.request_level, request_at = u.request_at, token_level = u.token_level, token_at = u.token_at,
	input_token_level = u.input_token_level, input_token_at = u.input_token_at,
	output_token_level = u.output_token_level, output_token_at = u.output_token_at,
	inflight_count = u.inflight_count, inflight_tokens = u.inflight_tokens, paused_until = u.paused_until,
	vtime = u.vtime, updated_at = now()
	FROM unnest($1::text[], $2::float8[], $3::timestamptz[], $4::float8[], $5::timestamptz[], $6::int[], $7::bigint[],
		$8::timestamptz[], $9::float8[], $10::float8[], $11::timestamptz[], $12::float8[], $13::timestamptz[])
		AS u(key, request_level, request_at, token_level, token_at, inflight_count, inflight_tokens, paused_until, vtime,
			input_token_level, input_token_at, output_token_level, output_token_at)
	WHERE l.key = u.key`

// limitStateParams is how many parameters saveLimitsSQL takes: a statement that embeds it numbers its
// own from limitStateParams+1.
const limitStateParams = 13

// limitStateArgs are the arguments of saveLimitsSQL: the state of every dirty row, in key order.
func limitStateArgs(rows map[string]*limitRow) []any {
	var (
		keys        = []string{}
		levels      [4][]float64 // by dimension: requests, tokens, input, output
		ats         [4][]*time.Time
		vt          []float64
		paused      []*time.Time
		inflightN   []int32
		inflightTok []int64
	)
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		r := rows[k]
		if !r.dirty {
			continue
		}
		keys = append(keys, r.limit.Key)
		for d := range r.limit.Rates() {
			b := r.state.Bucket(d)
			levels[d], ats[d] = append(levels[d], b.Level), append(ats[d], opt(b.At))
		}
		inflightN = append(inflightN, int32(r.state.InflightCount))
		inflightTok = append(inflightTok, r.state.InflightTokens)
		paused = append(paused, opt(r.state.PausedUntil))
		vt = append(vt, r.vtime)
	}
	return []any{keys, levels[0], ats[0], levels[1], ats[1], inflightN, inflightTok, paused, vt,
		levels[2], ats[2], levels[3], ats[3]}
}
