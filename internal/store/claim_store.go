package store

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/throttle"
)

// claimStoreSQL writes a claim's decisions in one statement: $1 to $13 the limit rows' state (see
// limitStateArgs); $14 and $15 tickets whose wait reason changed, and the reasons; $16 the expired
// tickets; $17 and $18 the admitted tickets and their instants, running when their owner is the
// claimer, $19, or listens (sluice_owner.listens, RenewListening: the rows of the owners $22 are read
// once, not once per ticket); $20 and $21 the notification channel and payload prefix, $22 the other
// owners to notify: a listening owner is told the IDs of its tickets, at most notifyIDsPer a
// notification (owner|ids:1,2,3), another is only woken (owner).
// $25 to $32 what the admissions drew per key and second (see usage.args), added to sluice_usage.
// It returns, for each line $23, the tickets queued in it, counted to at most 1,000 past the $24 it
// admitted (the statement's snapshot, taken before its own updates, still counts the admitted tickets
// as queued). The count reads the line index in its order: without the ORDER BY it may be planned as
// a scan of the table.
//
// The CTEs touch disjoint tickets (store checks that no ticket is in two lists), each of them still
// queued: the claim holds their locks. Each says the state it expects and returns what it changed,
// and the unchecked branch fails the statement, and so the claim's transaction, naming every ticket
// that did not change as decided (sluice_fail): a claim never returns a ticket it did not admit. That
// branch is part of the result (an Append runs every branch), so it is evaluated whatever the lines.
//
// claimStoreAllowancesSQL is the statement of a claim that holds a limit with allowances: it also
// writes the rows' allowance states ($33, see saveLimitsWithStates), finishes the refused tickets
// $34 with their outcomes $35 (a Refusal as JSON) and the keys of the limits that refused them $37,
// at $36, the claim's instant, for any replica's Deliverer to fail them, and marks each admitted
// ticket that draws on a limit with allowances ($38, in $17's order) with the allowances that counted
// it ($39), so that its completion reconciles those (allowanceAppendSQL).
var claimStoreSQL, claimStoreAllowancesSQL = claimStore(false), claimStore(true)

// idsMark separates a notified owner from the IDs of its tickets a claim moved to running, in the
// payload of its admitted notification; notifyIDsPer is the most IDs one notification carries, so
// that a payload stays within Postgres's 8,000 bytes (200 IDs of 19 digits and their commas, the
// owner, the schema).
const (
	idsMark      = "|ids:"
	notifyIDsPer = "200"
)

// claimStore is claimStoreSQL, or with allowances claimStoreAllowancesSQL.
func claimStore(allowances bool) string {
	save, refused, refusedIDs, refusedRows, spends, spendsSet := saveLimitsSQL, "", "", "", "", ""
	if allowances {
		save = saveLimitsWithStates(33)
		refused = `
), refused AS (
	UPDATE {s}.sluice_ticket t SET state = 'finished', finished_at = $36, deliver_after = $36, outcome_kind = '` + OutcomeRefused + `',
		outcome = r.outcome, wait_reason = 'allowance of ' || r.key
	FROM unnest($34::bigint[], $35::bytea[], $37::text[]) AS r(id, outcome, key) WHERE t.id = r.id AND t.state = 'queued'
	RETURNING t.id`
		refusedIDs, refusedRows = ` || $34::bigint[]`, `
			UNION ALL SELECT id FROM refused`
		spends, spendsSet = `, $38::bool[], $39::jsonb[]`, `, allowance_spend = u.spends, allowance_charged = u.charged`
	}
	return `WITH limits AS (` + save + refused + `
), waits AS (
	UPDATE {s}.sluice_ticket t SET wait_reason = w.reason
	FROM unnest($14::bigint[], $15::text[]) AS w(id, reason) WHERE t.id = w.id AND t.state = 'queued'
	RETURNING t.id
), expired AS (
	DELETE FROM {s}.sluice_ticket WHERE id = ANY($16) AND state = 'queued' RETURNING id
), listening AS MATERIALIZED (
	SELECT id FROM {s}.sluice_owner WHERE id = ANY($22) AND listens
), admitted AS (
	UPDATE {s}.sluice_ticket t
	SET state = CASE WHEN $19 <> '' AND t.owner = $19 THEN 'running'
		WHEN t.owner IN (SELECT id FROM listening) THEN 'running' ELSE 'admitted' END, admitted_at = u.at` + spendsSet + `
	FROM unnest($17::bigint[], $18::timestamptz[]` + spends + `) AS u(id, at` + map[bool]string{true: ", spends, charged", false: ""}[allowances] + `)
	WHERE t.id = u.id AND t.state = 'queued'
	RETURNING t.id, t.owner, t.state
), unchanged AS (
	SELECT array_agg(id ORDER BY id) AS ids FROM (
		SELECT unnest($14::bigint[] || $16::bigint[] || $17::bigint[]` + refusedIDs + `) AS id
		EXCEPT ALL (SELECT id FROM waits UNION ALL SELECT id FROM expired UNION ALL SELECT id FROM admitted` + refusedRows + `)) m
), woken AS (
	SELECT count(pg_notify($20, $21 || w.payload)) AS n FROM (
		SELECT o AS payload FROM unnest($22::text[]) AS o
		WHERE NOT EXISTS (SELECT 1 FROM admitted a WHERE a.owner = o AND a.state = 'running')
		UNION ALL
		SELECT r.owner || '` + idsMark + `' || string_agg(r.id::text, ',' ORDER BY r.id) FROM (
			SELECT a.id, a.owner, (row_number() OVER (PARTITION BY a.owner ORDER BY a.id) - 1) / ` + notifyIDsPer + ` AS part
			FROM admitted a WHERE a.state = 'running' AND a.owner = ANY($22)) r
		GROUP BY r.owner, r.part) w
), used AS (
	` + usageUpsert(25) + `
)
SELECT d.line, (SELECT count(*) FROM (SELECT 1 FROM {s}.sluice_ticket t
	WHERE t.line_key = d.line AND t.state = 'queued' ORDER BY priority, vstart, seq LIMIT 1000 + d.admitted) q)
FROM unnest($23::text[], $24::int[]) AS d(line, admitted), woken
UNION ALL
SELECT NULL, {s}.sluice_fail('sluice: claim: tickets ' || ids::text || ' were not queued when the claim stored its decisions')
FROM unchanged WHERE ids IS NOT NULL`
}

// admittedTicket is a ticket the claim admitted, at its instant at: spends says whether it draws on a
// limit with allowances, and charged which allowances of which of its limits counted it (JSON, NULL
// for none).
type admittedTicket struct {
	id      int64
	at      time.Time
	spends  bool
	charged *string
}

// refusedTicket is a ticket the claim refused for a spent allowance: its outcome (a Refusal as JSON)
// and the key of the limit that refused it.
type refusedTicket struct {
	id      int64
	outcome []byte
	key     string
}

// waitChange is a ticket left waiting whose wait reason changed, and its new reason.
type waitChange struct {
	id     int64
	reason string
}

// lineAdmitted is a line that admitted tickets, and how many.
type lineAdmitted struct {
	line     string
	admitted int
}

// store writes the claim's decisions (wait reasons, expired and admitted tickets, limit rows), has the
// admitted tickets' owners notified, and reads the depth of the lines that admitted, in one statement
// sent with the COMMIT. The decisions become the statement's array parameters here, a column each.
func (c *claimRun) store(ctx context.Context) error {
	// The limit rows change when tickets were admitted, or when pending releases were folded into
	// them (deleted from the ledger, so they must be saved).
	if len(c.admitted) == 0 && !c.folded && len(c.waits) == 0 && len(c.expired) == 0 && len(c.refused) == 0 {
		return c.tx.commitWith(ctx, nil, "")
	}
	waitIDs, reasons := waitColumns(c.waits)
	admittedIDs, admittedAt, spends, charged := admittedColumns(c.admitted)
	refusedIDs, outcomes, refusedBy := refusedColumns(c.refused)
	depthLines, depthAdmitted := depthColumns(c.depths)
	if err := c.checkDisjoint(admittedIDs, refusedIDs, waitIDs); err != nil {
		return err
	}
	args := limitStateArgs(c.locked)
	c.usage.refunds(c.locked, c.now)
	owners := slices.Sorted(maps.Keys(c.owners))
	args = append(args, waitIDs, reasons, c.expired, admittedIDs, admittedAt, c.p.Owner,
		NotifyChannel, c.q.opts.Schema+"|"+kindAdmitted+"|", owners, depthLines, depthAdmitted)
	// The count reads the tickets this statement admits as still queued (a statement sees the table
	// as it began), so it reads past them, to 1,000 more: $24.
	args = append(args, c.usage.args()...)
	stmt := claimStoreSQL
	if anyAllowances(c.locked) || len(c.refused) > 0 {
		stmt = claimStoreAllowancesSQL
		args = append(args, allowanceStateArgs(c.locked), refusedIDs, outcomes, c.now, refusedBy, spends, charged)
	}
	admitted := make(map[string]int, len(c.depths))
	for _, d := range c.depths {
		admitted[d.line] = d.admitted
	}
	return c.tx.commitWith(ctx, func(rows pgx.Rows) error {
		var line *string
		var depth int64
		if err := rows.Scan(&line, &depth); err != nil || line == nil {
			return err
		}
		c.res.QueueDepth[*line] = depth - int64(admitted[*line])
		return nil
	}, c.q.s(stmt), args...)
}

// The claim's decisions become the store's array parameters, a column each, in the rows' order. No
// rows make nil columns, which pgx sends as NULL: the statement reads them as empty lists (unnest,
// ANY, ||).

// waitColumns are claimStoreSQL's $14 and $15.
func waitColumns(ws []waitChange) (ids []int64, reasons []string) {
	for _, w := range ws {
		ids, reasons = append(ids, w.id), append(reasons, w.reason)
	}
	return ids, reasons
}

// admittedColumns are claimStoreSQL's $17 and $18, and claimStoreAllowancesSQL's $38 and $39.
func admittedColumns(as []admittedTicket) (ids []int64, at []time.Time, spends []bool, charged []*string) {
	for _, a := range as {
		ids, at, spends, charged = append(ids, a.id), append(at, a.at), append(spends, a.spends), append(charged, a.charged)
	}
	return ids, at, spends, charged
}

// refusedColumns are claimStoreAllowancesSQL's $34, $35 and $37.
func refusedColumns(rs []refusedTicket) (ids []int64, outcomes [][]byte, keys []string) {
	for _, r := range rs {
		ids, outcomes, keys = append(ids, r.id), append(outcomes, r.outcome), append(keys, r.key)
	}
	return ids, outcomes, keys
}

// depthColumns are claimStoreSQL's $23 and $24.
func depthColumns(ds []lineAdmitted) (lines []string, admitted []int) {
	for _, d := range ds {
		lines, admitted = append(lines, d.line), append(admitted, d.admitted)
	}
	return lines, admitted
}

// checkDisjoint fails when a ticket is in two of the claim's lists (admitted, expired, refused, wait
// reason changed): a bug, which the store would apply once, silently, whichever way.
func (c *claimRun) checkDisjoint(admitted, refused, waits []int64) error {
	seen := make(map[int64]string, len(admitted)+len(c.expired)+len(waits)+len(refused))
	for _, l := range []struct {
		what string
		ids  []int64
	}{{"admitted", admitted}, {"expired", c.expired}, {"left waiting", waits}, {"refused", refused}} {
		for _, id := range l.ids {
			if prev, dup := seen[id]; dup {
				return fmt.Errorf("ticket %d is both %s and %s by this claim (lines %q)", id, prev, l.what, c.lines)
			}
			seen[id] = l.what
		}
	}
	return nil
}

// usage sums what a claim's admissions drew, per key and second, for sluice_usage. A claim holds the
// row of every key it admits on until its commit, so no other claim writes the same usage rows
// meanwhile.
type usage map[usageAt]*usageSums

// usageSums are one key's usage in one second: requests, and tokens in all, of input and of output,
// net of the refunds folded in the second; and those refunds, of input and of output.
type usageSums struct{ requests, tokens, input, output, returnedInput, returnedOutput int64 }

type usageAt struct {
	key    string
	second int64 // Unix seconds
}

// add records one admission at at, drawing cost on each of keys.
func (u usage) add(keys []string, at time.Time, cost throttle.Cost) {
	for _, k := range keys {
		r := u.row(k, at)
		r.requests++
		r.tokens += cost.Total()
		r.input += cost.Input
		r.output += cost.Output
	}
}

// row is key's sums for the second of at.
func (u usage) row(key string, at time.Time) *usageSums {
	a := usageAt{key, at.Unix()}
	if u[a] == nil {
		u[a] = &usageSums{}
	}
	return u[a]
}

// usageUpsert adds the usage given as the statement's parameters $n to $n+7 (see usage.args) to
// sluice_usage. Its writer must hold the limit rows of the keys it writes for.
func usageUpsert(n int) string {
	return fmt.Sprintf(`INSERT INTO {s}.sluice_usage AS u (key, second, requests, tokens, input_tokens, output_tokens,
		returned_input, returned_output)
	SELECT * FROM unnest($%d::text[], $%d::timestamptz[], $%d::bigint[], $%d::bigint[], $%d::bigint[], $%d::bigint[],
		$%d::bigint[], $%d::bigint[])
	ON CONFLICT (key, second) DO UPDATE SET requests = u.requests + excluded.requests, tokens = u.tokens + excluded.tokens,
		input_tokens = u.input_tokens + excluded.input_tokens, output_tokens = u.output_tokens + excluded.output_tokens,
		returned_input = u.returned_input + excluded.returned_input, returned_output = u.returned_output + excluded.returned_output`,
		n, n+1, n+2, n+3, n+4, n+5, n+6, n+7)
}

// args are claimStoreSQL's $25 to $32: keys, seconds, requests, tokens, input and output tokens, and
// the input and output tokens returned, in a stable order.
func (u usage) args() []any {
	ats := slices.SortedFunc(maps.Keys(u), func(a, b usageAt) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.second, b.second))
	})
	n := len(ats)
	keys, seconds := make([]string, n), make([]time.Time, n)
	requests, tokens, input, output := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	returnedInput, returnedOutput := make([]int64, n), make([]int64, n)
	for i, at := range ats {
		keys[i], seconds[i] = at.key, time.Unix(at.second, 0).UTC()
		r := u[at]
		requests[i], tokens[i], input[i], output[i] = r.requests, r.tokens, r.input, r.output
		returnedInput[i], returnedOutput[i] = r.returnedInput, r.returnedOutput
	}
	return []any{keys, seconds, requests, tokens, input, output, returnedInput, returnedOutput}
}

// charged is, for each of t's limits with allowances, the keys of the allowances that count t when
// this claim admits it: what its release reconciles (throttle.SpendRelease.Charged).
func (c *claimRun) charged(t Ticket) map[string][]string {
	var out map[string][]string
	for _, k := range t.LimitKeys {
		if r := c.locked[k]; r != nil && len(r.limit.Allowances) > 0 {
			if out == nil {
				out = map[string][]string{}
			}
			out[k] = r.limit.Allowances.Keys()
		}
	}
	return out
}
