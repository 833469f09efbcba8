package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/jackc/pgx/v5"
)

// changedByKey is the context key of WithChangedBy's value.
type changedByKey struct{}

// WithChangedBy returns a copy of ctx that says who makes the limit changes written with it:
// UpsertLimits, UpsertLimitsTx, ChangeLimit, EnsureLimits and DeleteLimit record who in the limit
// history (LimitHistory). The sluice command passes "user@host (sluice limits set)", the dashboard
// "dashboard <remote address>". Without it, a change made through pgqueue is recorded as made by the
// program (ProgramChangedBy); one made in SQL by the session's user and client address. An empty who
// is the same as none.
func WithChangedBy(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, changedByKey{}, who)
}

// ProgramChangedBy is who the limit history records for a change made through pgqueue without
// WithChangedBy: "program NAME pid N on HOST", NAME being the base name of the program's path
// (os.Args[0]). It is computed once.
func ProgramChangedBy() string { return programChangedBy() }

var programChangedBy = sync.OnceValue(func() string {
	name := "unknown"
	if len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown host"
	}
	return fmt.Sprintf("program %s pid %d on %s", name, os.Getpid(), host)
})

// changedBy is who ctx says makes a change, or the program.
func changedBy(ctx context.Context) string {
	if who, _ := ctx.Value(changedByKey{}).(string); who != "" {
		return who
	}
	return ProgramChangedBy()
}

// headerLearning is who the history records for what a provider's headers taught (Observe).
const headerLearning = "header learning"

// setChangedBy tells the limit history's trigger, for the rest of tx, who makes its changes and, with
// an injected clock, when: the settings are local to the transaction (a pooler in transaction mode
// keeps them to it too).
func (q *Queue) setChangedBy(ctx context.Context, tx pgx.Tx, who string) error {
	_, err := tx.Exec(ctx, `SELECT set_config('sluice.changed_by', $1, true),
		set_config('sluice.changed_at', coalesce($2::timestamptz::text, ''), true)`, who, q.nowArg())
	if err != nil {
		return fmt.Errorf("say who changes the limits: %w", err)
	}
	return nil
}
