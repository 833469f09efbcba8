package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/pgqueue"
)

// Mount the dashboard under /sluice/ in your own server, behind your own authentication. It is
// read-only unless Options.AllowWrites is set. With Options.TemporalUIURL, a ticket's view links to
// its workflow in Temporal's UI.
func Example() {
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
	h, err := dashboard.New(q, dashboard.Options{
		// Temporal's dev server's UI; the values are path-escaped.
		TemporalUIURL: "http://localhost:8233/namespaces/{namespace}/workflows/{workflow_id}/{run_id}/history",
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", h))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// Read the overview's table from a script: the 50 keys with the most tickets queued, of those that
// start with "tenant:", and how many match. A bad parameter is answered 400 with {"error": "..."}
// naming it.
func ExampleOverview() {
	resp, err := http.Get("http://127.0.0.1:8080/sluice/api/overview?sort=queued&dir=desc&prefix=tenant:&page=1&page_size=50")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		log.Fatalf("overview: %s", e.Error)
	}
	var o dashboard.Overview
	if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d keys, page %d of %d\n", o.Total, o.Page, o.Pages)
	for _, r := range o.Rows { // pgqueue.OverviewRows
		wait := time.Duration(0) // JSON leaves a row's wait out: it is now less oldest_queued
		if !r.OldestQueued.IsZero() {
			wait = o.Now.Sub(r.OldestQueued)
		}
		fmt.Printf("%s: %d queued, oldest wait %v, %.0f%% of %s\n", r.Key, r.Queued, wait.Round(time.Second), 100*r.Use, r.UseOf)
	}
}
