package pgqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
)

// Which of thousands of tenants wait longest: one page of 20 of the keys that start with "tenant:",
// ordered by the database, and how many there are. The dashboard's table reads the same.
func ExampleQueue_Overview() {
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
	o, err := q.Overview(ctx, pgqueue.OverviewParams{Prefix: "tenant:", Sort: pgqueue.OverviewByOldestWait, Desc: true, Limit: 20})
	if err != nil {
		log.Fatal(err) // a bad parameter is named with its value
	}
	fmt.Printf("%d tenants\n", o.Total)
	for _, r := range o.Rows {
		fmt.Printf("%s: %d queued, oldest %v, %.0f%% of its %s limit in use\n", r.Key, r.Queued, r.OldestWait.Round(time.Second),
			100*r.Use, r.UseOf)
	}
	// The next page: Offset 20.
}
