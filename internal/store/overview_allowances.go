package store

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// overviewAllowances are the uses of the allowances of some keys, as overviewRows takes them ($7
// keys, $8 shares, $9 names): of each key, its allowance that has used the largest share of its
// amount. An allowance counts in a window of hours to months, with reconciliations folded in from a
// ledger and calendars in time zones: the share is throttle's arithmetic (AllowanceStatuses), done in
// Go, and the statement only compares it with the shares of the key's other limits.
type overviewAllowances struct {
	keys   []string
	shares []float64
	names  []string
}

// useOfAllowance is UseOf for an allowance: "allowance " and its spec, as in "allowance
// tokens=10000/day".
func useOfAllowance(spec string) string { return "allowance " + spec }

// readOverviewAllowances reads the allowances of keys (those without any are left out) as the next
// claim will see them, pending reconciliations folded in.
func (q *Queue) readOverviewAllowances(ctx context.Context, tx pgx.Tx, keys []string) (overviewAllowances, error) {
	out := overviewAllowances{keys: []string{}, shares: []float64{}, names: []string{}}
	if len(keys) == 0 {
		return out, nil
	}
	statuses, err := q.limitStatuses(ctx, tx, keys)
	if err != nil {
		return out, err
	}
	for _, k := range slices.Sorted(maps.Keys(statuses)) {
		best, name := -1.0, ""
		for _, a := range statuses[k].Allowances {
			if a.Allowance.Amount <= 0 {
				continue // not valid; never written
			}
			if share := float64(a.Used) / float64(a.Allowance.Amount); share > best {
				best, name = share, useOfAllowance(a.Spec)
			}
		}
		if best > 0 {
			out.keys, out.shares, out.names = append(out.keys, k), append(out.shares, best), append(out.names, name)
		}
	}
	return out, nil
}

// allowanceKeysSQL are the keys in the prefix range ($1 to $2, as overviewSQL's) whose limit has
// allowances.
const allowanceKeysSQL = `SELECT l.key FROM {s}.sluice_limit l WHERE l.key ~>=~ $1::text AND l.key ~<~ $2::text AND l.allowances IS NOT NULL`

// raiseByAllowances raises the use of each row to its key's allowance use in as, when that is larger:
// the rows of a page cut by another order than use, which overviewSQL read without them.
func raiseByAllowances(rows []OverviewRow, as overviewAllowances) {
	for i := range rows {
		if j := slices.Index(as.keys, rows[i].Key); j >= 0 && as.shares[j] > rows[i].Use {
			rows[i].Use, rows[i].UseOf = as.shares[j], as.names[j]
		}
	}
}
