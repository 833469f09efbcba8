package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/admit"
)

// KeyTicket is a ticket as a limit's list shows it: the ticket and, while it waits, its place among
// the tickets waiting on the limit and what holds it now.
type KeyTicket struct {
	Ticket
	// Place is the ticket's place among the queued tickets drawing on the listed limit, in the order
	// Explain counts tickets ahead (1: the first); 0 for a ticket that is not queued.
	Place int `json:"place,omitempty"`
	// WaitsFor and WaitsOn are what holds the queued ticket now, and the key of the limit that does:
	// throttle.Explanation's WaitsFor and Key, from the ticket's limits' states alone (without the
	// tickets ahead and releases, the latest of several refusing limits is the one that refills last).
	WaitsFor string `json:"waits_for,omitempty"`
	WaitsOn  string `json:"waits_on,omitempty"`
}

// Tickets returns up to max of the tickets that draw on key, from any line, and the database's
// clock: first those queued, in the order Explain counts tickets ahead (priority, fair-share start
// tag, arrival), each with its place and what holds it; then those running and admitted on it.
// Finding the queued tickets drawing on a key other than their line's reads every queued ticket. An
// unknown key returns an error wrapping ErrUnknownLimit.
func (q *Queue) Tickets(ctx context.Context, key string, max int) ([]KeyTicket, time.Time, error) {
	if max < 1 {
		return nil, time.Time{}, fmt.Errorf("sluice: tickets: max must be >= 1, got %d", max)
	}
	if _, err := q.Limit(ctx, key); err != nil {
		return nil, time.Time{}, err
	}
	var (
		out []KeyTicket
		now time.Time
	)
	err := q.snapshot(ctx, func(tx pgx.Tx) (err error) {
		if now, err = q.now(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q.s(`SELECT `+ticketColumns+` FROM (
			(SELECT * FROM {s}.sluice_ticket WHERE $1 = ANY(limit_keys) AND state = 'queued' ORDER BY priority, vstart, seq LIMIT $2)
			UNION ALL
			(SELECT * FROM {s}.sluice_ticket WHERE $1 = ANY(limit_keys) AND state IN ('running', 'admitted')
				ORDER BY state DESC, admitted_at, id LIMIT $2)
		) t LIMIT $2`), key, max)
		ts, err := collectTickets(rows, err)
		if err != nil {
			return err
		}
		out, err = q.placeTickets(ctx, tx, key, ts, now)
		return err
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sluice: tickets of %q: %w", key, err)
	}
	return out, now.UTC(), nil
}

// placeTickets gives the queued of ts, the tickets drawing on key with those queued first in order,
// their places and what holds them at now.
func (q *Queue) placeTickets(ctx context.Context, tx pgx.Tx, key string, ts []Ticket, now time.Time) ([]KeyTicket, error) {
	seen := map[string]bool{}
	var keys []string
	for _, t := range ts {
		for _, k := range t.LimitKeys {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	limits, err := q.limitStates(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]KeyTicket, len(ts))
	for i, t := range ts {
		out[i] = KeyTicket{Ticket: t}
		if t.State != TicketStateQueued {
			continue
		}
		out[i].Place = i + 1
		in := admit.ExplainInput{Ticket: t.candidate(), Limits: limits, Now: now}
		if t.LineKey == key {
			in.Standing = map[string]admit.Standing{key: {AheadCount: i}}
		}
		e := admit.Explain(in)
		out[i].WaitsFor, out[i].WaitsOn = e.WaitsFor, e.Key
	}
	return out, nil
}
