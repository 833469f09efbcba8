package dispatcher

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrTransactionPooler is the error Start returns when Config.Pool goes through a pooler in
// transaction mode that Config.TransactionPooler does not declare. interceptor.ErrTransactionPooler
// is the same value.
var ErrTransactionPooler = errors.New("sluice: Options.Pool goes through a pooler in transaction mode " +
	"(such as PgBouncer's pool_mode = transaction) but Options.TransactionPooler is not set")

// probeRounds bounds the rounds in which detectTransactionPooler looks for two connections sharing a
// backend, once a pooler has shown itself.
const probeRounds = 3

// poolerFix is what the refusal and the hints tell the user to do.
const poolerFix = "set Options.TransactionPooler, add default_query_exec_mode=exec to the pool's URL " +
	"(pgx's simple or exec protocol, no cached prepared statements), and either set Options.ListenURL to a " +
	"direct connection string or leave it empty to poll; see \"Connections and poolers\" in Sluice's docs/connections.md"

// checkPooler refuses a Pool behind an undeclared transaction pooler. Unflagged, the plugin would
// LISTEN on a pooled connection and cache prepared statements on it, and a transaction pooler hands
// the server connection under both to other clients between transactions: notifications go
// astray, statements fail at random (SQLSTATE 26000 or 42P05, or none), and activities run twice or
// hang. Relying on a SQLSTATE is not enough (on a fresh PgBouncer nothing fails at start), so the
// check looks at which Postgres backend serves the pool's connections.
func (d *Dispatcher) checkPooler(ctx context.Context) error {
	cfg := d.deps.cfg
	if cfg.TransactionPooler {
		return nil
	}
	evidence, err := detectTransactionPooler(ctx, cfg.Pool, d.deps.log.Warn)
	if err != nil {
		return fmt.Errorf("sluice: check for a pooler in front of Options.Pool: %w", cfg.poolerHint(err))
	}
	if evidence != "" {
		return fmt.Errorf("%w: %s. Unflagged, Sluice keeps session state (LISTEN, prepared statements) that "+
			"the pooler hands to other clients, and activities run twice or hang. To fix it, %s",
			ErrTransactionPooler, evidence, poolerFix)
	}
	return nil
}

// detectTransactionPooler returns why pool goes through a pooler in transaction (or statement)
// mode, or "" when nothing shows it. It costs one pooled connection and two one-row statements when
// pool reaches Postgres directly; through a pooler, one more short-lived connection and up to
// 2 x probeRounds more such statements.
//
// A direct connection is never refused: there the backend PID Postgres reports at connect (pgx's
// PgConn.PID, from BackendKeyData) is pg_backend_pid() for the life of the connection, so the check
// stops after its second statement. A pooler reports a PID of its own making, which proves a pooler
// but not its mode: a pooler in session mode keeps one backend per client and is as safe as a
// direct connection. So only what a session can never see is taken as proof: one connection served
// by two backends in two transactions in a row, or two connections open at once served by the same
// backend (PgBouncer hands an idle server connection to the next client, last in first out). A
// pooler that shows neither is let through with a warning through warn.
//
// Every statement uses the simple protocol, so that the check itself works whatever the pool's
// DefaultQueryExecMode (a cached statement is what fails first behind PgBouncer before 1.21, or
// from 1.21 to 1.23 without max_prepared_statements).
func detectTransactionPooler(ctx context.Context, pool *pgxpool.Pool, warn func(msg string, args ...any)) (string, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer c.Release()
	reported := c.Conn().PgConn().PID()
	// Outside a transaction, each statement is a transaction of its own: a transaction pooler may
	// serve each from a different server connection.
	first, err := backendPID(ctx, c.Conn())
	if err != nil {
		return "", err
	}
	second, err := backendPID(ctx, c.Conn())
	if err != nil {
		return "", err
	}
	switch {
	case first != second:
		return fmt.Sprintf("one connection of the pool was served by Postgres backend %d, then by backend %d, "+
			"in two transactions in a row", first, second), nil
	case first == reported:
		return "", nil // a direct connection, or a pooler that shows nothing of itself
	}
	// A pooler: the PID it reported at connect is not a backend's. Its mode shows when a second
	// connection, opened while c stays open, is served by the backend that served c.
	other, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		// The pool works; a connection of the check's own making is not worth refusing to start over.
		warn("sluice: Options.Pool goes through a pooler (the backend PID it reported at connect is not the one serving it); "+
			"the check for transaction mode could not open a second connection: if the pooler is in transaction mode, "+poolerFix,
			"reported_pid", reported, "backend_pid", first, "error", err)
		return "", nil
	}
	defer func() { _ = other.Close(context.WithoutCancel(ctx)) }()
	// A few rounds, each a statement on other then one on c: another client of a busy pooler may
	// take the idle server connection between the two.
	for range probeRounds {
		third, err := backendPID(ctx, other)
		if err != nil {
			return "", err
		}
		if third == second {
			return sharedBackend(third), nil
		}
		next, err := backendPID(ctx, c.Conn())
		if err != nil {
			return "", err
		}
		if next == third {
			return sharedBackend(next), nil
		}
		if next != first {
			return fmt.Sprintf("one connection of the pool was served by Postgres backend %d, then by backend %d, "+
				"in separate transactions", first, next), nil
		}
	}
	warn("sluice: Options.Pool goes through a pooler (the backend PID it reported at connect is not the one serving it) "+
		"that kept a backend per connection, as in session mode; if it is in transaction mode, "+poolerFix,
		"reported_pid", reported, "backend_pid", first)
	return "", nil
}

// sharedBackend is the evidence of two connections served by the one backend pid.
func sharedBackend(pid uint32) string {
	return fmt.Sprintf("two connections of the pool, open at once, were both served by Postgres backend %d, "+
		"which two sessions never share", pid)
}

// backendPID returns the PID of the Postgres backend that serves conn's next statement. The SQL is
// here rather than in pgqueue's sqlc queries because it must run on a given connection with the
// simple protocol.
func backendPID(ctx context.Context, conn *pgx.Conn) (uint32, error) {
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return 0, fmt.Errorf("read pg_backend_pid(): %w", err)
	}
	return uint32(pid), nil //nolint:gosec // a backend PID is positive
}

// poolerHint adds to err, when Postgres says a prepared statement does not exist (SQLSTATE 26000) or
// already exists (42P05), that Pool is likely behind a pooler in transaction mode that Sluice was not
// told of: its server connections, and their prepared statements, change hands between transactions.
func (c Config) poolerHint(err error) error {
	var pgErr *pgconn.PgError
	if c.TransactionPooler || !errors.As(err, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
		return err
	}
	return fmt.Errorf("%w (prepared statements do not follow this connection between transactions: if Options.Pool "+
		"goes through a pooler in transaction mode, such as PgBouncer, %s)", err, poolerFix)
}
