package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/throttle"
)

// The statements that write allowances are variants of the ones every claim and release runs, used
// only when a limit row they write has allowances: a limit without them costs admission nothing more
// than it did before allowances existed.

// anyAllowances reports whether a dirty row of rows has allowances, or kept the states of some
// (hasAllowanceStates): its state must be saved with theirs.
func anyAllowances(rows map[string]*limitRow) bool {
	for _, r := range rows {
		if r.dirty && r.hasAllowanceStates() {
			return true
		}
	}
	return false
}

// hasAllowanceStates reports whether r has allowances, or the states of allowances removed from it
// that still count something (throttle.AllowanceStates keeps them): its releases reconcile them.
func (r *limitRow) hasAllowanceStates() bool {
	return len(r.limit.Allowances) > 0 || len(r.state.Allowances) > 0 || r.readStates
}

// saveLimitsWithStates is saveLimitsSQL that also writes each row's allowance states, given as the
// parameter $n (allowanceStateArgs): NULL for a row without allowances keeps what the row has.
func saveLimitsWithStates(n int) string {
	s := strings.Replace(saveLimitsSQL, "SET\n", fmt.Sprintf("SET\n\tallowance_state = coalesce(($%d::jsonb[])[u.ord], l.allowance_state),\n", n), 1)
	return strings.Replace(strings.Replace(s, "AS u(key,", "WITH ORDINALITY AS u(key,", 1), "output_token_at)\n", "output_token_at, ord)\n", 1)
}

// allowanceStateArgs are the allowance states saveLimitsWithStates writes, in limitStateArgs' order: each
// dirty row's as JSON ({} when it counts nothing any more), NULL for a row that never had any.
func allowanceStateArgs(rows map[string]*limitRow) []*string {
	out := []*string{}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		r := rows[k]
		switch {
		case !r.dirty:
		case !r.hasAllowanceStates():
			out = append(out, nil)
		case len(r.state.Allowances) == 0:
			empty := "{}"
			out = append(out, &empty)
		default:
			out = append(out, jsonOrNull(r.state.Allowances))
		}
	}
	return out
}

// jsonOrNull is v as JSON text, nil (NULL) for an empty slice or map. v is one of throttle's
// allowance types, which always encode. Text, not bytes: under the simple protocol (a pooler's
// exec mode) pgx would send bytes as bytea, which jsonb does not read.
func jsonOrNull[T interface {
	~[]throttle.Allowance | ~map[string]throttle.AllowanceState | ~map[string][]string
}](v T) *string {
	if len(v) == 0 {
		return nil
	}
	b, _ := json.Marshal(v)
	s := string(b)
	return &s
}
