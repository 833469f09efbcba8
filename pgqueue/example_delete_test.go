package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
)

// A tenant has left: its limit key goes, once nothing unfinished names it. A key in use is refused
// and left as it was; the limit history records the deletion and who made it.
func ExampleQueue_DeleteLimit() {
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

	who := pgqueue.WithChangedBy(ctx, "alice@ops-laptop (tenant acme offboarded, OPS-77)")
	switch err := q.DeleteLimit(who, "tenant:acme"); {
	case errors.Is(err, pgqueue.ErrLimitInUse):
		// Tickets still wait for it or hold it: pause it (SetPause), let them finish, try again.
		fmt.Println("not yet:", err)
	case errors.Is(err, pgqueue.ErrUnknownLimit):
		fmt.Println("no such limit")
	case err != nil:
		log.Fatal(err)
	default:
		// From now on an Enqueue naming tenant:acme fails with ErrUnknownLimit.
		fmt.Println("deleted")
	}
}
