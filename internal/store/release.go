package store

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/throttle"
)

// A ticket's release, in one place. A ticket that finishes gives back what it reserved on each of its
// limits, reconciled with the usage it reported (admit.ReportedUsage, throttle.ReleasedCost), by
// one of two roads:
//   - A completion (CompleteMany) appends the releases, summed per limit, to the release ledger
//     (releaseAppendSQL), without locking the limit row; the next transaction that holds the row
//     takes them from the ledger (releaseTakeSQL, in lockAndTake) and folds them into it
//     (foldReleases). Readers that do not hold the row net the pending releases out (pendingCount,
//     pendingTokens).
//   - A requeue, cancel or hand-back releases under the row locks at once (release).
// Either way the refunds leave the usage history too (usage.refund).

// releaseAppendSQL appends to the release ledger what the tickets of the CTE done released: for each
// limit key, how many they were, the tokens they had reserved, and the refunds of those whose usage
// was reported (done.actual >= 0), in all and of output tokens. done has each ticket's cost,
// output_cost and limit_keys, and actual and actual_output as CompleteMany passes them (actual_output
// clamped to [0, actual] by admit.ReportedUsage). It is throttle.ReleasedCost summed per key
// (Released.Add), in SQL because a completion is one statement for up to MaxCompleteBatch tickets;
// TestQueue_CompleteManyLedgerMatchesThrottle checks the two agree on random batches.
const releaseAppendSQL = `
	INSERT INTO {s}.sluice_release (key, count, reserved, refund, refund_output)
	SELECT k, count(*), sum(d.cost), coalesce(sum(d.cost - d.actual) FILTER (WHERE d.actual >= 0), 0),
		coalesce(sum(d.output_cost - d.actual_output) FILTER (WHERE d.actual >= 0), 0)
	FROM done d, unnest(d.limit_keys) AS k GROUP BY k ORDER BY k
	RETURNING key`

// releaseTakeSQL deletes from the release ledger the releases of the limit rows of the CTE held, and
// sums them per key (sums: key, count, reserved, refund, refund_output): two CTEs of lockAndTake.
const releaseTakeSQL = `taken AS (
			DELETE FROM {s}.sluice_release r WHERE r.key IN (SELECT key FROM held)
			RETURNING r.key, r.count, r.reserved, r.refund, r.refund_output
		), sums AS MATERIALIZED (
			SELECT key, sum(count)::bigint AS count, least(sum(reserved), 9223372036854775807)::bigint AS reserved, sum(refund)::float8 AS refund,
				sum(refund_output)::float8 AS refund_output
			FROM taken GROUP BY key
		)`

// spendReleasesSQL sums the allowance ledger's rows of source (a table or CTE of its columns, with
// its WHERE clause if any) per key and admission instant, and returns per key (key, releases) the
// sums as a JSON list of throttle.SpendRelease: what the tickets admitted at that instant reserved
// and used. The ledger holds only tickets whose usage was reported.
//
// The sums saturate at the bounds of bigint (satSum): reported usage is bounded where it enters
// (CompleteParams), but a ledger holds the rows of many completions, and one sum out of range would
// fail every claim of the key.
func spendReleasesSQL(source string) string {
	return `SELECT key, jsonb_agg(jsonb_build_object('admitted_at', admitted_at, 'reported', reported,
		'reserved', jsonb_build_object('tokens', jsonb_build_object('input', ri, 'output', ro), 'money', rm),
		'actual', jsonb_build_object('tokens', jsonb_build_object('input', ai, 'output', ao), 'money', am),
		'charged', charged, 'legacy', charged IS NULL)) AS releases
	FROM (SELECT key, admitted_at, reported, charged, ` + satSum("reserved_input") + ` AS ri, ` + satSum("reserved_output") + ` AS ro,
			` + satSum("reserved_money") + ` AS rm, ` + satSum("actual_input") + ` AS ai, ` + satSum("actual_output") + ` AS ao,
			` + satSum("actual_money") + ` AS am
		FROM ` + source + ` GROUP BY key, admitted_at, reported, charged) g
	GROUP BY key`
}

// satSum is the SQL sum of the bigint expression x, saturated at the bounds of bigint (sum of bigint
// is numeric, so the sum itself cannot overflow; its cast back could).
func satSum(x string) string {
	return `greatest(least(sum(` + x + `), 9223372036854775807), -9223372036854775808)::bigint`
}

// allowanceAppendSQL appends to the allowance ledger, for each limit of a ticket of the CTE done whose
// allowances counted it at its admission (allowance_charged names them), what those tickets reserved
// and used, summed per key, admission instant, allowances counted, and whether the usage was reported
// (see takeSpendsSQL): every such ticket, reported or not, so that what the tickets in flight hold of
// an allowance drops as each ends. A ticket admitted by an older replica (allowance_charged NULL)
// follows the older rule: the limits that have allowances now, when allowance_spend is set. done has
// each ticket's admitted_at, cost, output_cost, cost_money, limit_keys, allowance_spend,
// allowance_charged, and actual, actual_output and actual_money as CompleteMany passes them
// (actual_money negative: not known, the reservation stands unless no tokens were used). The sums
// saturate (satSum); every figure is at least 0.
var allowanceAppendSQL = `
	INSERT INTO {s}.sluice_allowance_release (key, admitted_at, reported, charged, reserved_input, reserved_output, reserved_money,
		actual_input, actual_output, actual_money)
	SELECT k, d.admitted_at, d.actual >= 0, d.allowance_charged -> k, ` + satSum(allowanceSpendColumns[0]) + `,
		` + satSum(allowanceSpendColumns[1]) + `, ` + satSum(allowanceSpendColumns[2]) + `,
		` + satSum(allowanceSpendColumns[3]) + `, ` + satSum(allowanceSpendColumns[4]) + `,
		` + satSum(allowanceSpendColumns[5]) + `
	FROM done d, unnest(d.limit_keys) AS k
	WHERE d.allowance_spend AND d.admitted_at IS NOT NULL AND CASE WHEN d.allowance_charged IS NULL
		THEN EXISTS (SELECT 1 FROM {s}.sluice_limit l WHERE l.key = k AND l.allowances IS NOT NULL)
		ELSE d.allowance_charged ? k END
	GROUP BY k, d.admitted_at, d.actual >= 0, d.allowance_charged -> k ORDER BY k, d.admitted_at`

// allowanceSpendColumns are one ticket's release on its allowances (runUsage.spendRelease) as
// allowanceAppendSQL computes it from a row of done, before it sums them: what it reserved, of input
// tokens, output tokens and money, then what it used (0 when it reported nothing: Reported is
// done.actual >= 0, and throttle counts Actual only when reported). The money it used is what it
// reported, or with nothing known the reservation, unless it used no tokens (runUsage.usedMoney). It is
// SQL because a completion is one statement for up to MaxCompleteBatch tickets;
// TestAllowanceLedgerColumnsMatchGo checks each column against runUsage.spendRelease on generated
// tickets and reports, as CompleteMany passes them (completeUsage).
var allowanceSpendColumns = [6]string{
	"d.cost - d.output_cost", "d.output_cost", "d.cost_money",
	"greatest(d.actual, 0) - d.actual_output", "d.actual_output",
	`CASE WHEN d.actual < 0 THEN 0 WHEN d.actual_money >= 0 THEN d.actual_money WHEN d.actual = 0 THEN 0
			ELSE d.cost_money END`,
}

// runUsage is what a run reported it used: total tokens (negative: not reported), of which output; its
// cost in money (negative: not known, the reservation stands, unless no tokens were used); and void
// when it never ran, so that its allowances give back all it reserved, its request included.
type runUsage struct {
	total, output, money int64
	void                 bool
}

// spendRelease is t's release on the allowances of its limits, given what its run used. Actual is zero
// when nothing was reported (throttle counts it only when Reported), as the allowance ledger stores
// it (allowanceSpendColumns).
func (u runUsage) spendRelease(t Ticket) throttle.SpendRelease {
	used, reported := admit.ReportedUsage(u.total, u.output)
	return throttle.SpendRelease{AdmittedAt: t.AdmittedAt, Reserved: throttle.Spend{Tokens: t.Reserved(), Money: t.CostMoney},
		Actual: throttle.Spend{Tokens: used, Money: u.usedMoney(t.CostMoney, reported, used.Total())}, Reported: reported, Void: u.void}
}

// usedMoney is the money a run counts as used, given its ticket's money reservation, whether it
// reported its usage, and the tokens it reported: nothing when it reported no usage (the reservation
// stands, and Actual is not read); what it reported when that is known; nothing when it used no
// tokens; else the reservation. It is the CASE of allowanceSpendColumns, branch for branch.
func (u runUsage) usedMoney(costMoney int64, reported bool, tokens int64) int64 {
	switch {
	case !reported:
		return 0
	case u.money >= 0:
		return u.money
	case tokens == 0:
		return 0
	}
	return costMoney
}

// chargedOn is what t's admission charged on the allowances of limit r: the allowances its admission
// recorded, or for a ticket an older replica admitted (which recorded none), every allowance r has
// now when the ticket drew on allowances at all.
func (t Ticket) chargedOn(r *limitRow) []string {
	if t.charged != nil || !t.spend {
		return t.charged[r.limit.Key]
	}
	return r.limit.Allowances.Keys()
}

// released is what t gives back to each of its limits, given what its run used.
func (u runUsage) released(t Ticket) throttle.Released {
	used, reported := admit.ReportedUsage(u.total, u.output)
	return throttle.ReleasedCost(t.Reserved(), used, reported)
}

// querier runs a query in a transaction: a pgx.Tx, or a claim's claimTx.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// lockAndTake runs lock, a statement that locks limit rows (selecting limitColumns from sluice_limit,
// in key order), and in the same statement deletes from the ledger the releases completions appended
// for the rows it locked (see CompleteMany) and reads the clock. The rows it locked join held, with
// those releases folded in; a row held already (a transaction's own lock does not skip it) keeps the
// state the claim has decided so far, and only the new releases are folded into it. It returns the
// keys the statement locked, in key order, the instant, and whether any release was folded: the
// caller must then save the rows, since the releases are gone from the ledger. args are lock's, from
// $2 on; $1 is the injected instant.
//
// Only a holder of a limit row's lock takes its releases, so each is applied once; one committed after
// this statement's snapshot waits for the next. The clock is read after the locks are held and the
// releases taken, so that no decision uses an instant older than the state it reads (and
// Bucket.Refill ignores one that is).
func (q *Queue) lockAndTake(ctx context.Context, tx querier, held map[string]*limitRow, lock string, args ...any) (keys []string, now time.Time, folded bool, err error) {
	rs, err := tx.Query(ctx, q.s(`WITH held AS MATERIALIZED (`+lock+`
		), `+releaseTakeSQL+`, clock AS MATERIALIZED ( -- after every lock and the ledger's delete: it reads both to their end
			SELECT coalesce($1::timestamptz, clock_timestamp()) AS now
			FROM (SELECT count(*) FROM held) after_locks, (SELECT count(*) FROM sums) after_sums
		)
		SELECT held.*, s.key IS NOT NULL, coalesce(s.count, 0), coalesce(s.reserved, 0), coalesce(s.refund, 0), coalesce(s.refund_output, 0), c.now
		FROM held LEFT JOIN sums s ON s.key = held.key CROSS JOIN clock c ORDER BY held.key`), append([]any{q.nowArg()}, args...)...)
	if err != nil {
		return nil, now, false, err
	}
	defer rs.Close()
	sums := map[string]throttle.Released{}
	var spending []string // the locked rows with allowances
	for rs.Next() {
		var (
			taken bool
			rel   throttle.Released
			count int64
		)
		r, err := scanLimit(rs, &taken, &count, &rel.Reserved, &rel.Refund, &rel.RefundOutput, &now)
		if err != nil {
			return nil, now, false, err
		}
		if r.hasAllowanceStates() {
			spending = append(spending, r.limit.Key)
		}
		if _, ok := held[r.limit.Key]; !ok {
			held[r.limit.Key] = r
		}
		keys = append(keys, r.limit.Key)
		if taken {
			rel.Count = int(count)
			sums[r.limit.Key] = rel
		}
	}
	rs.Close() // before Err: closing reads what the round trip sent after the statement (claimTx)
	if err := rs.Err(); err != nil {
		return nil, now, false, err
	}
	now = now.UTC()
	folded = foldReleases(held, sums, now)
	if len(spending) == 0 {
		return keys, now, folded, nil
	}
	spends, err := q.takeSpends(ctx, tx, spending)
	if err != nil {
		return nil, now, false, err
	}
	return keys, now, foldSpends(held, spends, now) || folded, nil
}

// foldSpends reconciles the allowances of rows at now with the usage lockAndTake took from the
// allowance ledger, each in the window of its admission, and reports whether there was any.
func foldSpends(rows map[string]*limitRow, spends map[string][]spendRow, now time.Time) bool {
	for k, srs := range spends {
		r := rows[k]
		for _, sr := range srs {
			if sr.Legacy { // appended by an older replica, which recorded no allowances
				sr.Charged = r.limit.Allowances.Keys()
			}
			r.state = r.limit.ReleaseSpend(r.state, now, sr.SpendRelease)
		}
		r.dirty = true
	}
	return len(spends) > 0
}

// foldReleases applies the releases lockAndTake took to rows at now and reports whether there were
// any: the caller must then save the rows, since the releases are gone from the ledger.
func foldReleases(rows map[string]*limitRow, sums map[string]throttle.Released, now time.Time) bool {
	for k, sum := range sums {
		r := rows[k]
		r.state, r.dirty = r.limit.ReleaseMany(r.state, now, sum), true
		r.refunded += sum.Refund
		r.refundedOutput += sum.RefundOutput
	}
	return len(sums) > 0
}

// release gives back the reservations of tickets (each admitted or running, locked by the caller) on
// every limit they hold, reconciling the token budget with actual usage where it is known. Limit rows
// are locked in key order, waiting: a release is short and must not be skipped.
//
// It returns the instant of the release, read after the locks are taken: a claim that saw the ticket
// in flight then has an earlier instant, one that did not a later one, so the tickets' admitted_at and
// finished_at order every pair of decisions on a key as they happened.
func (q *Queue) release(ctx context.Context, tx pgx.Tx, ts []Ticket, actual []runUsage) (time.Time, error) {
	var keys []string
	for _, t := range ts {
		keys = append(keys, t.LimitKeys...)
	}
	rows, err := q.lockLimits(ctx, tx, keys, false)
	if err != nil {
		return time.Time{}, err
	}
	now, err := q.now(ctx, tx)
	if err != nil || len(keys) == 0 {
		return now, err
	}
	used := usage{}
	for i, t := range ts {
		rel := actual[i].released(t)
		refund, refundOutput := int64(math.Round(rel.Refund)), int64(math.Round(rel.RefundOutput))
		for _, k := range t.LimitKeys {
			r := rows[k]
			if r == nil { // the limit was deleted while the ticket ran
				continue
			}
			r.state = r.limit.ReleaseMany(r.state, now, rel)
			if r.hasAllowanceStates() && !t.AdmittedAt.IsZero() {
				sr := actual[i].spendRelease(t)
				sr.Charged = t.chargedOn(r)
				r.state = r.limit.ReleaseSpend(r.state, now, sr)
			}
			r.dirty = true
			if refund != 0 || refundOutput != 0 {
				used.refund(k, now, refund, refundOutput)
			}
		}
	}
	if err := q.saveLimits(ctx, tx, rows); err != nil {
		return now, err
	}
	// What was given back leaves the usage history too (a 429 requeued counts its request, not its
	// tokens), under the row locks lockLimits took.
	if len(used) > 0 {
		if _, err := tx.Exec(ctx, q.s(usageUpsert(1)), used.args()...); err != nil {
			return now, err
		}
	}
	slices.Sort(keys)
	return now, q.notify(ctx, tx, kindWork, slices.Compact(keys)[0])
}

// refund records tokens reported usage gave back to key, in all and of output, at the instant the
// claim folded them in: the history counts what was spent, not only what was reserved, and what came
// back apart (Explain's share of a reservation that comes back).
func (u usage) refund(key string, at time.Time, tokens, output int64) {
	r := u.row(key, at)
	r.tokens -= tokens
	r.input -= tokens - output
	r.output -= output
	r.returnedInput += tokens - output
	r.returnedOutput += output
}

// refunds records, at the instant at, the refunds that the releases folded into rows gave back.
func (u usage) refunds(rows map[string]*limitRow, at time.Time) {
	for k, r := range rows {
		if r.refunded != 0 || r.refundedOutput != 0 {
			u.refund(k, at, int64(math.Round(r.refunded)), int64(math.Round(r.refundedOutput)))
		}
	}
}
