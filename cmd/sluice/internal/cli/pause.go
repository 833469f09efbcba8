package cli

import (
	"context"
	"flag"
	"fmt"
	"time"
)

// maxPause bounds a pause: a year and a day, what --for has always taken.
const maxPause = 366 * 24 * time.Hour

// runPause sets KEY's pause to exactly what is given (pgqueue.Queue.SetPause): shorter or longer than
// a pause in force, a provider's included. --until not after now lifts the pause.
func runPause(ctx context.Context, r *runner, args []string) error {
	fs := r.flagSet("pause")
	d := durationFlag(fs, "for", 0, "how long from now (e.g. 10m)")
	var until time.Time
	fs.Func("until", "until when, in RFC 3339 (e.g. 2026-12-06T15:04:05Z); one not after now lifts the pause", func(s string) error {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return fmt.Errorf("must be an instant in RFC 3339, such as 2026-12-06T15:04:05Z or 2026-12-06T16:04:05+01:00, got %q", s)
		}
		until = t
		return nil
	})
	keys, err := r.parse(fs, "pause", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("pause takes one KEY, got %d", len(keys))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["for"] && given["until"]:
		return usageErr("pause %s: give --for or --until, not both", keys[0])
	case !given["for"] && !given["until"]:
		return usageErr("pause %s: give --for D (e.g. 10m) or --until TIME (RFC 3339, e.g. 2026-12-06T15:04:05Z)", keys[0])
	case given["for"] && (*d <= 0 || *d > maxPause):
		return usageErr("pause %s: --for must be a duration from 1ns to 8784h (e.g. 10m), got %v (resume lifts a pause)", keys[0], *d)
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	now, err := r.dbNow(ctx)
	if err != nil {
		return err
	}
	if given["for"] {
		until = now.Add(*d)
	} else if until.Sub(now) > maxPause {
		return usageErr("pause %s: --until must be at most 8784h from now, got %s (%v from now)", keys[0],
			until.Format(time.RFC3339), until.Sub(now).Round(time.Second))
	}
	if err := r.q.SetPause(ctx, keys[0], until); err != nil {
		return keyErr(err)
	}
	if !r.g.json {
		if until.After(now) {
			fmt.Fprintf(r.env.Stdout, "%s paused until %s (%v from now)\n", keys[0], until.UTC().Format(time.RFC3339Nano),
				until.Sub(now).Round(time.Second))
		} else {
			fmt.Fprintf(r.env.Stdout, "%s resumed: %s is not after now\n", keys[0], until.UTC().Format(time.RFC3339Nano))
		}
	}
	return r.printStatus(ctx, statusQuery{keys: keys}, 0)
}

func runResume(ctx context.Context, r *runner, args []string) error {
	keys, err := r.parse(r.flagSet("resume"), "resume", args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageErr("resume takes one KEY, got %d", len(keys))
	}
	if err := r.connect(ctx, false); err != nil {
		return err
	}
	if err := r.q.Resume(ctx, keys[0]); err != nil {
		return keyErr(err)
	}
	return r.printStatus(ctx, statusQuery{keys: keys}, 0)
}

// dbNow is the database's clock: pauses are instants on it, whatever this machine's clock says.
func (r *runner) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := r.pool.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&now)
	return now, err
}
