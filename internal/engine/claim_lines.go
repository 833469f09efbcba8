package engine

import (
	"context"
	"slices"
)

// adoptAhead adds to the first lines the line of the page read ahead, when the locks did not take it:
// the page's statement locked its row after another claimer freed it. Left undecided, the line would
// make other claimers skip it with nothing to wake them for it.
func (c *claimRun) adoptAhead(ctx context.Context, lines []string) ([]string, error) {
	ahead := c.tx.ahead
	if len(ahead) == 0 || slices.Contains(lines, ahead[0].LineKey) {
		return lines, nil
	}
	got, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit
		WHERE key = $2 FOR UPDATE SKIP LOCKED`, ahead[0].LineKey)
	if err != nil {
		return nil, err
	}
	c.took(now, folded)
	return append(got, lines...), nil
}

// firstLines is how many lines a claim locks first; each further chunk is twice the last, up to
// ClaimParams.MaxLines in all.
const firstLines = 4

// lockLines locks up to n lines with queued work after the key after (and up to upto, unless empty),
// skipping those other claimers hold, takes their pending releases and reads the clock (see
// lockAndTake), and returns their keys in key order.
func (c *claimRun) lockLines(ctx context.Context, after, upto string, n int) ([]string, error) {
	// The EXISTS is one index probe per limit row. The lines this claim has read already are left
	// out: SKIP LOCKED skips rows other transactions hold, never this one's, so the line adopted from
	// the page read ahead (adoptAhead), which lies past the first chunk's keys, would otherwise come
	// back in a later chunk and be read again, its admitted tickets still queued in the table.
	lines, now, folded, err := c.q.lockAndTake(ctx, c.tx, c.locked, `SELECT `+limitColumns+` FROM {s}.sluice_limit l
		WHERE key > $3 AND ($4 = '' OR key <= $4) AND key <> ALL($5)
			AND EXISTS (SELECT 1 FROM {s}.sluice_ticket t WHERE t.line_key = l.key AND t.state = 'queued')
		ORDER BY key LIMIT $2 FOR UPDATE OF l SKIP LOCKED`, n, after, upto, c.readLines())
	if err != nil {
		return nil, err
	}
	c.took(now, folded)
	for _, line := range lines {
		delete(c.unavailable, line) // held by another claimer when a ticket reached it, not now
	}
	return lines, nil
}

// readLines returns the lines this claim has read, never nil (a NULL array would make "<> ALL" NULL).
func (c *claimRun) readLines() []string {
	if c.lines == nil {
		return []string{}
	}
	return c.lines
}
