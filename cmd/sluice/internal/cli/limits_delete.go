package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// runLimitsDelete deletes KEY's limit (pgqueue.Queue.DeleteLimit) when --yes confirms it, and prints
// the deletion as the limit history recorded it. A key that unfinished tickets name is refused.
func runLimitsDelete(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("limits")
	yes := fs.Bool("yes", false, "confirm limits delete: without it nothing is deleted")
	keys, err := r.parse(fs, "limits", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("limits delete takes one KEY, got %d", len(keys))
	}
	key := keys[0]
	if err := throttle.ValidateKey(key); err != nil {
		return usageErr("%v", err)
	}
	if !*yes {
		return usageErr("limits delete %s: this deletes the limit %q on every replica: its configuration, its admission state "+
			"(buckets, pause, fair-share tags, pending releases) and its usage and run-time history; its history of changes is kept. "+
			"Enqueues naming it then fail until it is created again. Pass --yes to delete it", key, key)
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	if err := r.q.DeleteLimit(pgqueue.WithChangedBy(ctx, r.operator()+" (sluice limits delete)"), key); err != nil {
		if errors.Is(err, pgqueue.ErrLimitInUse) {
			return fmt.Errorf("%w (sluice tickets %s lists them)", err, key)
		}
		return keyErr(err)
	}
	// The deletion as the history recorded it: the last record of the key, unless it was created
	// again meanwhile.
	h, err := r.q.LimitHistory(ctx, key, time.Time{}, 1)
	if err != nil {
		return fmt.Errorf("limit %q deleted; read its history: %w", key, err)
	}
	if r.g.json {
		return writeJSON(r.env.Stdout, h[0])
	}
	fmt.Fprintf(r.env.Stdout, "deleted %s (sluice limits history %s shows it)\n", key, key)
	return historyTable(r.env.Stdout, h)
}
