package pgqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/pgqueue"
	"github.com/sluicehq/sluice/throttle"
)

// Who changed a limit, and when: a change made through pgqueue says who with WithChangedBy (else the
// program is named), one made in SQL is recorded with the session's user and address, and what the
// provider's headers taught is kept apart as kind "learned". The sluice command's limits history
// prints the same.
func ExampleQueue_LimitHistory() {
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

	who := pgqueue.WithChangedBy(ctx, "alice@ops-laptop (quota raise, ticket OPS-42)")
	if _, err := q.ChangeLimit(who, "openai", throttle.LimitChange{TokensPerMinute: ptr(200_000.0)}, false); err != nil {
		log.Fatal(err)
	}

	// The last 20 changes of the past week, oldest first.
	changes, err := q.LimitHistory(ctx, "openai", time.Now().Add(-7*24*time.Hour), 20)
	if err != nil {
		log.Fatal(err) // wraps pgqueue.ErrUnknownLimit for a key that never existed
	}
	for _, c := range changes {
		var fields []string
		for _, f := range c.Changed {
			fields = append(fields, fmt.Sprintf("%s: %v → %v", f.Field, f.Before, f.After))
		}
		fmt.Printf("%s %-10s %s: %s\n", c.At.Format(time.DateTime), c.Kind, c.Who, strings.Join(fields, ", "))
	}
}

// A record of the limit history in JSON, as the sluice command's limits history --json and the
// dashboard's api/history serve it.
func ExampleLimitRecord() {
	before := throttle.Limit{Key: "openai", MaxConcurrent: 20, TokensPerMinute: 90_000, TokenBurst: 90_000}
	after := before
	after.TokensPerMinute, after.TokenBurst = 200_000, 200_000
	c := pgqueue.LimitRecord{ID: 7, Key: "openai", At: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), Kind: pgqueue.ChangeConfigured,
		Who: "dashboard 10.0.0.7:51234", Before: &before, After: &after,
		Changed: []pgqueue.FieldChange{{Field: "tokens_per_minute", Before: 90_000, After: 200_000},
			{Field: "token_burst", Before: 90_000, After: 200_000}}}
	for _, f := range c.Changed {
		fmt.Printf("%s: %v → %v\n", f.Field, f.Before, f.After)
	}
	b, err := json.Marshal(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	// Output:
	// tokens_per_minute: 90000 → 200000
	// token_burst: 90000 → 200000
	// {"id":7,"key":"openai","at":"2026-12-04T12:00:00Z","kind":"configured","who":"dashboard 10.0.0.7:51234","before":{"key":"openai","max_concurrent":20,"requests_per_second":0,"burst":0,"tokens_per_minute":90000,"token_burst":90000,"max_inflight_tokens":0,"input_tokens_per_minute":0,"input_token_burst":0,"output_tokens_per_minute":0,"output_token_burst":0},"after":{"key":"openai","max_concurrent":20,"requests_per_second":0,"burst":0,"tokens_per_minute":200000,"token_burst":200000,"max_inflight_tokens":0,"input_tokens_per_minute":0,"input_token_burst":0,"output_tokens_per_minute":0,"output_token_burst":0},"changed":[{"field":"tokens_per_minute","before":90000,"after":200000},{"field":"token_burst","before":90000,"after":200000}]}
}

// ptr is a pointer to v: throttle.LimitChange's fields are pointers, nil for no change.
func ptr[T any](v T) *T { return &v }
