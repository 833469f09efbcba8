package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatusParams selects the keys of Queue.StatusPage: the first Limit of those that start with Prefix,
// in key order.
type StatusParams struct {
	// Prefix keeps the keys that start with it (byte-wise); empty keeps every key. Defaults to "".
	Prefix string
	// Limit is the most keys read, at least 1. Required.
	Limit int
}

// StatusPage is the status of the first keys a StatusParams selects, in key order, and how many keys
// start with its prefix: Total less len(Keys) were left out. It is a plain value.
type StatusPage struct {
	Keys  []KeyStatus `json:"keys"`
	Total int64       `json:"total"`
}

// StatusPage returns the status of the first p.Limit keys that start with p.Prefix, in key order, and
// how many keys start with it. The prefix is a byte-wise range that the key prefix index (migration 8)
// serves, and only the page's keys get their figures read: its cost grows with the page and with the
// keys of the prefix, not with the keys of the schema. Status reads keys by name.
func (q *Queue) StatusPage(ctx context.Context, p StatusParams) (StatusPage, error) {
	if p.Limit < 1 {
		return StatusPage{}, fmt.Errorf("sluice: status: Limit must be >= 1, got %d", p.Limit)
	}
	from, to := keyPrefixRange(p.Prefix)
	const match = `l.key ~>=~ $1::text AND l.key ~<~ $3::text`
	var total int64
	keys, err := q.readStatus(ctx, statusHeld+`, page AS (SELECT l.key AS page_key FROM {s}.sluice_limit l WHERE `+match+` ORDER BY l.key LIMIT $4)
		SELECT `+limitReadColumns+statusColumns+` FROM page JOIN {s}.sluice_limit l ON l.key = page.page_key
			LEFT JOIN held h ON h.held_key = l.key`+statusUsage+` ORDER BY l.key`,
		func(now time.Time) []any { return []any{from, now.Add(-time.Minute), to, p.Limit} },
		func(tx pgx.Tx) error { // the count, by the same index, in the page's transaction
			return tx.QueryRow(ctx, q.s(`SELECT count(*) FROM {s}.sluice_limit l WHERE l.key ~>=~ $1::text AND l.key ~<~ $2::text`), from, to).Scan(&total)
		})
	if err != nil {
		return StatusPage{}, fmt.Errorf("sluice: status: %w", err)
	}
	return StatusPage{Keys: keys, Total: total}, nil
}

// keyPrefixRange is the byte-wise range [from, to) of the keys that start with prefix, which the
// text_pattern_ops index of migration 8 serves whatever the database's collation (~>=~ and ~<~). No
// printable key holds U+10FFFF, so every key that starts with prefix sorts byte-wise before prefix
// followed by it, and every other key at or after prefix sorts after that too.
func keyPrefixRange(prefix string) (from, to string) { return prefix, prefix + "\U0010FFFF" }
