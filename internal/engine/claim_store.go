package engine

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// claimStoreSQL writes a claim's decisions in one statement: $1 to $9 the limit rows' state (see
// limitStateArgs); $10 and $11 tickets whose wait reason changed, and the reasons; $12 the expired
// tickets; $13 and $14 the admitted tickets and their instants, running when their owner is the
// claimer, $15; $16 and $17 the notification channel and payload prefix, $18 the owners to notify.
// It returns, for each line $19, the tickets queued in it, counted to at most 1,000 (the statement's
// snapshot, taken before its own updates, still counts the admitted tickets as queued). The count
// reads the line index in its order: without the ORDER BY it may be planned as a scan of the table.
//
// The CTEs touch disjoint tickets: a ticket whose wait changed was neither admitted nor expired.
const claimStoreSQL = `WITH limits AS (` + saveLimitsSQL + `
), waits AS (
	UPDATE {s}.sluice_ticket t SET wait_reason = w.reason
	FROM unnest($10::bigint[], $11::text[]) AS w(id, reason) WHERE t.id = w.id
), expired AS (
	DELETE FROM {s}.sluice_ticket WHERE id = ANY($12)
), admitted AS (
	UPDATE {s}.sluice_ticket t
	SET state = CASE WHEN $15 <> '' AND t.owner = $15 THEN 'running' ELSE 'admitted' END, admitted_at = u.at
	FROM unnest($13::bigint[], $14::timestamptz[]) AS u(id, at) WHERE t.id = u.id
), woken AS (
	SELECT count(pg_notify($16, $17 || o)) AS n FROM unnest($18::text[]) AS o
)
SELECT line, (SELECT count(*) FROM (SELECT 1 FROM {s}.sluice_ticket t
	WHERE t.line_key = line AND t.state = 'queued' ORDER BY priority, vstart, seq LIMIT 1000) d)
FROM unnest($19::text[]) AS line, woken`

// store writes the claim's decisions (wait reasons, expired and admitted tickets, limit rows), has the
// admitted tickets' owners notified, and reads the depth of the lines that admitted, in one statement
// sent with the COMMIT.
func (c *claimRun) store(ctx context.Context) error {
	// The limit rows change when tickets were admitted, or when pending releases were folded into
	// them (deleted from the ledger, so they must be saved).
	if len(c.admittedIDs) == 0 && !c.folded && len(c.waitIDs) == 0 && len(c.expiredIDs) == 0 {
		return c.tx.commitWith(ctx, nil, "")
	}
	args := limitStateArgs(c.locked)
	owners := slices.Sorted(maps.Keys(c.owners))
	args = append(args, c.waitIDs, c.waitReasons, c.expiredIDs, c.admittedIDs, c.admittedAt, c.p.Owner,
		NotifyChannel, c.q.opts.Schema+"|"+kindAdmitted+"|", owners, c.depthLines)
	admitted := make(map[string]int, len(c.depthLines))
	for i, line := range c.depthLines {
		admitted[line] = c.depthAdmitted[i]
	}
	return c.tx.commitWith(ctx, func(rows pgx.Rows) error {
		var line string
		var depth int64
		if err := rows.Scan(&line, &depth); err != nil {
			return err
		}
		c.res.QueueDepth[line] = depth - int64(admitted[line])
		return nil
	}, c.q.s(claimStoreSQL), args...)
}
