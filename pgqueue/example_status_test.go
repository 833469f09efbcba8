package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Why activities wait: each key's tickets, what it admitted over the last minute against its limit,
// and why the head of its line waits. The sluice command's status prints the same.
func ExampleQueue_Status() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := q.Status(ctx) // every key; or q.Status(ctx, "openai")
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range st {
		fmt.Printf("%s: %d queued (oldest %v, waiting on %q), %d running, %d of %.0f tokens in the last minute\n",
			s.Configured.Key, s.Queued, s.OldestWait().Round(time.Second), s.HeadWaitReason, s.Running,
			s.TokensLastMinute, s.Effective.TokensPerMinute)
	}
	// The last 10 minutes, per 10 seconds: what the dashboard charts.
	usage, _, err := q.Usage(ctx, []string{"openai"}, 10*time.Minute, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range usage["openai"] {
		fmt.Printf("%s %d requests %d tokens\n", p.At.Format(time.TimeOnly), p.Requests, p.Tokens)
	}
}

// At thousands of keys, the status of the first keys of a prefix, and how many more there are: what
// sluice status --prefix tenant: --limit 50 prints.
func ExampleQueue_StatusPage() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	page, err := q.StatusPage(ctx, pgqueue.StatusParams{Prefix: "tenant:", Limit: 50})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range page.Keys {
		fmt.Printf("%s: %d queued, %d running\n", s.Configured.Key, s.Queued, s.Running)
	}
	if more := page.Total - int64(len(page.Keys)); more > 0 {
		fmt.Printf("%d more keys start with tenant:\n", more)
	}
}

// What runs and what waits on a key, in the order it will be admitted.
func ExampleQueue_Tickets() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	ts, now, err := q.Tickets(ctx, "openai", 20)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range ts {
		fmt.Printf("%s #%d %s/%s attempt %d, enqueued %v ago", t.State, t.Place, t.WorkflowID, t.ActivityType, t.Attempt,
			now.Sub(t.EnqueuedAt).Round(time.Second))
		if t.WaitsFor != "" {
			fmt.Printf(", waits for %s of %s", t.WaitsFor, t.WaitsOn)
		}
		fmt.Println()
	}
}

// Why a ticket waits and when it is expected to run, found from its workflow's ID.
func ExampleQueue_Explain() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	ts, err := q.FindTickets(ctx, pgqueue.TicketQuery{WorkflowID: "summarize-42"})
	if err != nil || len(ts) == 0 {
		log.Fatal("no ticket: ", err)
	}
	te, err := q.Explain(ctx, ts[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	e := te.Explanation
	if e == nil {
		fmt.Println("not waiting:", te.Ticket.State)
		return
	}
	fmt.Printf("place %d in %s, waits for %s of %s\n", e.Place, e.Line, e.WaitsFor, e.Key)
	for _, l := range e.Limits {
		fmt.Printf("  %s: room %v, %d ahead, ready %v\n", l.Key, l.Room, l.Ahead, l.ReadyAt.Sub(e.Now).Round(time.Second))
	}
	if e.Estimate.IsZero() {
		fmt.Println("no estimate:", e.Unknown)
	} else {
		fmt.Println("expected in", e.Estimate.Sub(e.Now).Round(time.Second))
	}
}

// Which migrations a schema has, before a deploy runs Migrate.
func ExampleMigrationState() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	st, err := pgqueue.MigrationState(ctx, pool, pgqueue.MigrateOptions{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("schema %s at version %d, %d pending\n", st.Schema, st.Version, len(st.Pending))
}

// Lower one field of a limit during an incident, keeping the rest: two such changes at once both
// apply. A new rate without its burst gets its default burst.
func ExampleQueue_ChangeLimit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q, err := pgqueue.New(pool, pgqueue.Options{Schema: "sluice"})
	if err != nil {
		log.Fatal(err)
	}
	tpm := 60_000.0
	l, err := q.ChangeLimit(ctx, "openai", throttle.LimitChange{TokensPerMinute: &tpm}, false)
	if errors.Is(err, pgqueue.ErrInvalidLimit) || errors.Is(err, pgqueue.ErrUnknownLimit) {
		log.Fatal(err) // names the key, the field and the value
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %.0f tokens a minute, burst %.0f\n", l.Key, l.TokensPerMinute, l.TokenBurst)
}
