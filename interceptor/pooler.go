package interceptor

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicehq/sluice/pgqueue"
)

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

// listen is how the dispatcher's notifier listens: on a connection taken from Pool, on ListenURL,
// or, behind a transaction pooler without ListenURL, not at all.
func (o Options) listen() pgqueue.Listen {
	return pgqueue.Listen{URL: o.ListenURL, Off: o.TransactionPooler && o.ListenURL == ""}
}

// poolerHint adds to err, when Postgres says a prepared statement does not exist (SQLSTATE 26000),
// that Pool is likely behind a pooler in transaction mode that Sluice was not told of.
func (o Options) poolerHint(err error) error {
	var pgErr *pgconn.PgError
	if o.TransactionPooler || !errors.As(err, &pgErr) || pgErr.Code != "26000" {
		return err
	}
	return fmt.Errorf("%w (a prepared statement vanished between transactions: if Options.Pool goes through "+
		"a pooler in transaction mode, such as PgBouncer, set Options.TransactionPooler and add "+
		"default_query_exec_mode=exec to its URL)", err)
}
