package interceptor

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/dispatcher"
)

// ErrTransactionPooler is returned, wrapped, by the plugin's start (Plugin.StartWorker, so
// worker.Start and worker.Run) when Options.Pool goes through a pooler in transaction mode, such as
// PgBouncer with pool_mode = transaction, and Options.TransactionPooler is not set. Test for it with
// errors.Is; the message says what showed the pooler and how to configure Sluice for it
// (docs/connections.md, "Connections and poolers"). The check needs no failure to happen first: it compares the Postgres
// backends that serve the pool's connections (see Options.TransactionPooler).
var ErrTransactionPooler = dispatcher.ErrTransactionPooler

// validatePooler checks the options that say how Pool reaches Postgres (Pool is not nil).
func (o Options) validatePooler() error {
	if o.ListenURL != "" {
		if _, err := pgx.ParseConfig(o.ListenURL); err != nil {
			// pgx's parse errors leave the password out.
			return fmt.Errorf("sluice: Options.ListenURL is not a Postgres URL or DSN: %w", err)
		}
	}
	if !o.TransactionPooler {
		return nil
	}
	if o.Pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		return errors.New("sluice: Options.TransactionPooler is set but Options.Pool's DefaultQueryExecMode is cache_statement, " +
			"whose prepared statements a pooler in transaction mode cannot follow: add default_query_exec_mode=exec " +
			"to the pool's URL (or set ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeExec)")
	}
	return nil
}
