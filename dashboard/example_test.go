package dashboard_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/dashboard"
	"github.com/sluicehq/sluice/pgqueue"
)

// Mount the dashboard under /sluice/ in your own server, behind your own authentication. It is
// read-only unless Options.AllowWrites is set.
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
	h, err := dashboard.New(q, dashboard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", h))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
