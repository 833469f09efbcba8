package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// AllowanceStatus is how one allowance of a limit stands, for operators: what it has counted in its
// window (reservations, reconciled with the usage reported so far), what remains, and when it resets.
type AllowanceStatus struct {
	// Allowance is the allowance as admission applies it (its amount lowered to what header learning
	// taught, if lower).
	Allowance throttle.Allowance `json:"allowance"`
	// Spec is the allowance in the operators' syntax (tokens=5000000/day@America/Los_Angeles).
	Spec string `json:"spec"`
	// Used is what it has counted in the current window (money in micro-units); Remaining the rest of
	// its amount, 0 when spent (Used may pass the amount by usage reported above reservations).
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
	// WindowStart and ResetsAt bound a calendar allowance's current window: at ResetsAt it counts
	// from 0 again. For a rolling one WindowStart is zero and ResetsAt is when all it counts now
	// has fallen out of the trailing window (zero when it counts nothing).
	WindowStart time.Time `json:"window_start,omitzero"`
	ResetsAt    time.Time `json:"resets_at,omitzero"`
}

// AllowanceStatuses are the statuses of l's allowances, in l's order, with state s at now: what each
// counted in its window, what remains, and when it resets. Status and LimitStatus read them so;
// given a throttle.Explanation's limit and state, they are the figures it explains from.
func AllowanceStatuses(l throttle.Limit, s throttle.State, now time.Time) []AllowanceStatus {
	var out []AllowanceStatus
	for _, a := range l.Allowances {
		st := s.Allowances[a.Key()]
		as := AllowanceStatus{Allowance: a, Spec: a.String(), Used: a.Used(st, now)}
		as.Remaining = max(0, a.Amount-as.Used)
		if a.Calendar != "" {
			start, end := a.Window(now)
			as.WindowStart, as.ResetsAt = start.UTC(), end.UTC()
		} else if as.Used > 0 {
			// When a ticket of the whole amount fits: everything counted now has fallen out.
			as.ResetsAt = a.Check(st, now, a.Amount).RetryAt
		}
		out = append(out, as)
	}
	return out
}

// pendingSpendsSQL reads the allowance ledger's rows of the keys $1 (spendReleasesSQL): what
// completions appended that no claim has folded yet.
var pendingSpendsSQL = spendReleasesSQL(`{s}.sluice_allowance_release WHERE key = ANY($1)`)

// foldPendingSpends folds into the states of rows (by key) the allowance ledger's pending rows, at
// now, as the next claim holding each row will: a reader's view of the allowances, locking nothing.
// Only rows whose limit has allowances are read for.
func (q *Queue) foldPendingSpends(ctx context.Context, db DB, rows map[string]*limitRow, now time.Time) error {
	var keys []string
	for k, r := range rows {
		if r.hasAllowanceStates() {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	spends, err := scanSpends(db.Query(ctx, q.s(pendingSpendsSQL), keys))
	if err != nil {
		return err
	}
	foldSpends(rows, spends, now)
	return nil
}

// takeSpendsSQL deletes the allowance ledger's rows of the keys $1, whose limit rows the caller holds
// locked, and sums them (spendReleasesSQL).
var takeSpendsSQL = `WITH taken AS (DELETE FROM {s}.sluice_allowance_release WHERE key = ANY($1) RETURNING *) ` +
	spendReleasesSQL("taken")

// takeSpends takes from the allowance ledger, for the limit rows of keys, which tx holds locked, what
// completions appended: only a holder of a row's lock takes its rows, so each is reconciled once. It
// is a statement of its own, run by lockAndTake only when it locked a row with allowances.
func (q *Queue) takeSpends(ctx context.Context, tx querier, keys []string) (map[string][]spendRow, error) {
	return scanSpends(tx.Query(ctx, q.s(takeSpendsSQL), keys))
}

// spendRow is one row of the allowance ledger, summed: a reconciliation, and whether an older replica
// appended it without the allowances that counted its tickets (Legacy: every allowance the limit
// has then reconciles it, the older rule).
type spendRow struct {
	throttle.SpendRelease
	Legacy bool `json:"legacy"`
}

// scanSpends reads spendReleasesSQL's rows: the reconciliations of each key.
func scanSpends(rs pgx.Rows, err error) (map[string][]spendRow, error) {
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	spends := map[string][]spendRow{}
	for rs.Next() {
		var (
			key string
			b   []byte
			srs []spendRow
		)
		if err := rs.Scan(&key, &b); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &srs); err != nil {
			return nil, fmt.Errorf("allowance ledger of %q: %w", key, err)
		}
		spends[key] = srs
	}
	rs.Close() // before Err: a claim's transaction reads what its round trip sent after the statement
	return spends, rs.Err()
}
