package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// LimitHistoryRetention is how long Prune keeps the limit history (sluice_limit_change). Changes are
// rare, so the table stays small: 90 days answer "who changed this, and when" across an incident's
// review without keeping it forever.
const LimitHistoryRetention = 90 * 24 * time.Hour

// MaxLimitHistory is the most records LimitHistory returns in one call.
const MaxLimitHistory = 10_000

// ChangeKind is what a LimitRecord records.
type ChangeKind string

// The kinds of LimitRecord. A configured and a learned change made by one statement are two records.
const (
	// ChangeCreated is a limit that came into being (UpsertLimits, EnsureLimits, ChangeLimit with
	// create, an INSERT): Before is nil.
	ChangeCreated ChangeKind = "created"
	// ChangeConfigured is a change of the configuration: what UpsertLimits and ChangeLimit write, or an
	// UPDATE of those columns.
	ChangeConfigured ChangeKind = "configured"
	// ChangeLearned is a change of what a provider's rate-limit headers taught (Observe): Before and
	// After hold the learned figures, zero where nothing was learned; admission applies the configured
	// limit lowered to them (throttle.EffectiveLimit).
	ChangeLearned ChangeKind = "learned"
	// ChangeDeleted is a limit deleted (DeleteLimit, or a DELETE in SQL): After is nil.
	ChangeDeleted ChangeKind = "deleted"
)

// LimitRecord is one recorded change of a limit: when, what kind, who, and the limit before and after
// (for ChangeLearned, the learned figures). A trigger on sluice_limit writes it, so changes made in SQL
// are recorded too; the admission state (buckets, in-flight figures, pauses) is not. It is a plain
// value; its JSON names are what the sluice command's limits history --json and the dashboard's
// api/history serve.
type LimitRecord struct {
	// ID orders records written at the same instant.
	ID  int64  `json:"id"`
	Key string `json:"key"`
	// At is when the change was made: the database's clock, or Options.Now's.
	At   time.Time  `json:"at"`
	Kind ChangeKind `json:"kind"`
	// Who made it: what WithChangedBy said, else the program (ProgramChangedBy), "header learning"
	// for ChangeLearned, or for a change made in SQL the session's user and client address
	// ("postgres@10.0.0.7", "postgres (local socket)"), unless the transaction set sluice.changed_by.
	Who string `json:"who"`
	// Before and After are the limit, with Key set, before and after the change; nil before a
	// ChangeCreated and after a ChangeDeleted.
	Before *throttle.Limit `json:"before"`
	After  *throttle.Limit `json:"after"`
	// Changed lists the fields that differ between Before and After (a nil one counting as zero), in
	// throttle.Limit's order, under its JSON names: the figures, then one entry per allowance added,
	// removed, resized or whose OnSpent changed. The sluice command's limits history and the dashboard's
	// card both print this list.
	Changed []FieldChange `json:"changed"`
}

// FieldChange is one field of a limit that a LimitRecord changed, under throttle.Limit's JSON name.
// Zero means no limit of that kind (for ChangeLearned: nothing learned); a created limit's Before and a
// deleted limit's After are zero.
//
// Field "allowances" is one allowance, matched by its meter and period (throttle.Allowance.Key):
// BeforeAllowance and AfterAllowance are it before and after, nil where it was added or removed, and
// Before and After its Amount (money in micro-units), zero where it is nil. Its Amount, its OnSpent
// (an empty one being OnSpentWait) or both differ. The allowances are left out of the other fields.
type FieldChange struct {
	Field           string              `json:"field"`
	Before          float64             `json:"before"`
	After           float64             `json:"after"`
	BeforeAllowance *throttle.Allowance `json:"before_allowance,omitempty"`
	AfterAllowance  *throttle.Allowance `json:"after_allowance,omitempty"`
}

// limitFields are throttle.Limit's figures under their JSON names, in its order.
var limitFields = []struct {
	name string
	of   func(throttle.Limit) float64
}{
	{"max_concurrent", func(l throttle.Limit) float64 { return float64(l.MaxConcurrent) }},
	{"requests_per_second", func(l throttle.Limit) float64 { return l.RequestsPerSecond }},
	{"burst", func(l throttle.Limit) float64 { return l.Burst }},
	{"tokens_per_minute", func(l throttle.Limit) float64 { return l.TokensPerMinute }},
	{"token_burst", func(l throttle.Limit) float64 { return l.TokenBurst }},
	{"max_inflight_tokens", func(l throttle.Limit) float64 { return float64(l.MaxInflightTokens) }},
	{"input_tokens_per_minute", func(l throttle.Limit) float64 { return l.InputTokensPerMinute }},
	{"input_token_burst", func(l throttle.Limit) float64 { return l.InputTokenBurst }},
	{"output_tokens_per_minute", func(l throttle.Limit) float64 { return l.OutputTokensPerMinute }},
	{"output_token_burst", func(l throttle.Limit) float64 { return l.OutputTokenBurst }},
}

// changedFields are the fields that differ between before and after, nil counting as the zero Limit,
// as LimitRecord.Changed lists them: the figures in throttle.Limit's order, then the allowances, those
// of before in their order (changed or removed), then those added in after's order.
func changedFields(before, after *throttle.Limit) []FieldChange {
	var b, a throttle.Limit
	if before != nil {
		b = *before
	}
	if after != nil {
		a = *after
	}
	out := []FieldChange{}
	for _, f := range limitFields {
		if x, y := f.of(b), f.of(a); x != y {
			out = append(out, FieldChange{Field: f.name, Before: x, After: y})
		}
	}
	return append(out, allowanceChanges(b.Allowances, a.Allowances)...)
}

// allowanceChanges are the allowances of before and after, matched by Key, that were added, removed,
// resized or whose OnSpent changed.
func allowanceChanges(before, after throttle.Allowances) []FieldChange {
	var out []FieldChange
	change := func(b, a *throttle.Allowance) {
		c := FieldChange{Field: "allowances"}
		if b != nil {
			b := *b // a copy: the record's Before keeps its own
			c.Before, c.BeforeAllowance = float64(b.Amount), &b
		}
		if a != nil {
			a := *a
			c.After, c.AfterAllowance = float64(a.Amount), &a
		}
		out = append(out, c)
	}
	onSpent := func(a throttle.Allowance) throttle.OnSpent { return cmp.Or(a.OnSpent, throttle.OnSpentWait) }
	for i := range before {
		b := &before[i]
		j := slices.IndexFunc(after, func(a throttle.Allowance) bool { return a.Key() == b.Key() })
		switch {
		case j < 0:
			change(b, nil)
		case after[j].Amount != b.Amount || onSpent(after[j]) != onSpent(*b):
			change(b, &after[j])
		}
	}
	for i := range after {
		a := &after[i]
		if !slices.ContainsFunc(before, func(b throttle.Allowance) bool { return b.Key() == a.Key() }) {
			change(nil, a)
		}
	}
	return out
}

// LimitHistory returns the last max recorded changes of key at or after since (the zero time: all the
// history kept, LimitHistoryRetention), oldest first. A key with no history returns an empty slice if
// the limit exists and an error wrapping ErrUnknownLimit otherwise; a deleted key keeps its history.
// max must be from 1 to MaxLimitHistory. In SQL:
//
//	SELECT at, kind, who, before, after FROM sluice.sluice_limit_change WHERE key = 'openai' ORDER BY at, id;
func (q *Queue) LimitHistory(ctx context.Context, key string, since time.Time, max int) ([]LimitRecord, error) {
	if max < 1 || max > MaxLimitHistory {
		return nil, fmt.Errorf("sluice: limit history of %q: max must be from 1 to %d, got %d", key, MaxLimitHistory, max)
	}
	hist, err := q.limitHistory(ctx, q.pool, []string{key}, since, max)
	if err != nil {
		return nil, fmt.Errorf("sluice: limit history of %q: %w", key, err)
	}
	if out := hist[key]; len(out) > 0 {
		return out, nil
	}
	if _, err := q.Limit(ctx, key); err != nil {
		return nil, err
	}
	return []LimitRecord{}, nil
}

// limitHistory reads the last max records of each of keys at or after since, oldest first: a
// backward scan of the (key, at) index per key.
func (q *Queue) limitHistory(ctx context.Context, db DB, keys []string, since time.Time, max int) (map[string][]LimitRecord, error) {
	rows, err := db.Query(ctx, q.s(`SELECT c.id, c.key, c.at, c.kind, c.who, c.before, c.after
		FROM unnest($1::text[]) AS k(key) CROSS JOIN LATERAL (
			SELECT * FROM {s}.sluice_limit_change c WHERE c.key = k.key AND c.at >= $2 ORDER BY c.at DESC, c.id DESC LIMIT $3) c
		ORDER BY c.key, c.at, c.id`), keys, since, max)
	if err != nil {
		return nil, err
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (LimitRecord, error) {
		var r LimitRecord
		if err := row.Scan(&r.ID, &r.Key, &r.At, &r.Kind, &r.Who, &r.Before, &r.After); err != nil {
			return r, err
		}
		r.At = r.At.UTC()
		for _, l := range []*throttle.Limit{r.Before, r.After} {
			if l != nil {
				l.Key = r.Key
			}
		}
		r.Changed = changedFields(r.Before, r.After)
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]LimitRecord, len(keys))
	for _, r := range recs {
		out[r.Key] = append(out[r.Key], r)
	}
	return out, nil
}
