// Package poolflags gives the samples their -transaction-pooler and -listen-url flags, so that a
// sample run through PgBouncer in transaction mode sets the plugin's Options.TransactionPooler and
// Options.ListenURL (docs/connections.md). A program of your own sets those two options directly.
package poolflags

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler says how -database reaches Postgres, for the plugin's Options: directly (the zero value),
// or through a pooler in transaction mode such as PgBouncer's pool_mode = transaction, and then
// where the plugin listens for notifications. See docs/connections.md.
type Pooler struct {
	// TransactionPooler is Options.TransactionPooler: -transaction-pooler, else
	// $SLUICE_TRANSACTION_POOLER (1, true, 0 or false).
	TransactionPooler bool
	// ListenURL is Options.ListenURL, a direct Postgres URL the plugin listens on beside the pooled
	// -database: -listen-url, else $SLUICE_LISTEN_URL. Empty: the plugin polls.
	ListenURL string
}

// Define defines -transaction-pooler and -listen-url on fs. The function it returns, called after
// fs is parsed, gives their values. $SLUICE_TRANSACTION_POOLER is the flag's default, checked here;
// $SLUICE_LISTEN_URL is read after parsing, as DATABASE_URL is, so that -h does not print it.
func Define(fs *flag.FlagSet) (func() Pooler, error) {
	def := false
	if v := os.Getenv("SLUICE_TRANSACTION_POOLER"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("SLUICE_TRANSACTION_POOLER must be 1, true, 0 or false, got %q", v)
		}
		def = b
	}
	tp := fs.Bool("transaction-pooler", def, "-database goes through a pooler in transaction mode, such as PgBouncer's "+
		"pool_mode = transaction (default $SLUICE_TRANSACTION_POOLER)")
	listen := fs.String("listen-url", "", "a direct Postgres URL to listen for notifications on when -database goes "+
		"through a transaction pooler; unset, the workers poll (default $SLUICE_LISTEN_URL)")
	return func() Pooler {
		return Pooler{TransactionPooler: *tp, ListenURL: cmp.Or(*listen, os.Getenv("SLUICE_LISTEN_URL"))}
	}, nil
}

// PoolConfig parses dbURL for a pool. Behind a transaction pooler it turns pgx's default
// cache_statement mode, whose prepared statements the pooler hands to other clients, into exec, as
// Options.TransactionPooler requires (a program of your own can put default_query_exec_mode=exec in
// its URL instead).
func (p Pooler) PoolConfig(dbURL string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("-database: %w", err)
	}
	if p.TransactionPooler && cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return cfg, nil
}
