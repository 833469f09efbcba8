package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// tooManyClients reports whether Postgres refused a connection for want of slots: SQLSTATE 53300,
// "sorry, too many clients already".
func tooManyClients(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53300"
}

// refused reports whether err certainly happened before the statement reached Postgres, so that
// sending it again cannot do its work twice: a connection that could not be made (refused with
// 53300, or by the pooler), or an error pgx marks safe to retry.
func refused(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || tooManyClients(err) || pgconn.SafeToRetry(err)
}

// sleepCtx waits d, or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// listenFailures is the slog handler of a replica's notifier: it counts each warning (the notifier
// warns when its listener connection fails or is lost, then reconnects with backoff) as a failed
// listener connection, and keeps its error's text. Other records are dropped.
type listenFailures struct{ tally *fleetTally }

// Enabled reports whether level is a warning or worse.
func (h *listenFailures) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}

// Handle counts the record.
func (h *listenFailures) Handle(_ context.Context, r slog.Record) error {
	h.tally.stats.failedListens.Add(1)
	err := errors.New(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok && a.Key == "error" {
			err = e
			return false
		}
		return true
	})
	h.tally.fail("listen", err)
	return nil
}

// WithAttrs returns h: attributes are not kept.
func (h *listenFailures) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup returns h: groups are not kept.
func (h *listenFailures) WithGroup(string) slog.Handler { return h }
