package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// claimTx is the transaction of one claim, on a connection of its own. Its first statement is sent in
// one round trip with the BEGIN, its last with the COMMIT (pgx pipelines a batch), so that a claim
// costs the round trips of its statements only: the locks, a page per line, the writes.
type claimTx struct {
	conn  *pgx.Conn
	begun bool // the BEGIN has been sent
	done  bool // committed or rolled back
	// ahead, when not nil, is a page sent in the first round trip too, after the first statement, and
	// read into ahead.tickets when that statement's rows close (see newClaimTx).
	ahead *aheadPage
	// first, when not nil, is a statement sent in the first round trip after the BEGIN and before the
	// first statement, its rows read by first.scan: the enqueue of EnqueueClaiming.
	first *sentWith
	// last, when not nil, is a statement sent with the COMMIT, after the statement commitWith runs: the
	// notification of EnqueueClaiming.
	last *sentWith
}

// sentWith is a statement sent with others in one round trip, and what reads its rows.
type sentWith struct {
	sql  string
	args []any
	scan func(pgx.Rows) error // nil: its rows are discarded
}

// read reads s's result from br.
func (s *sentWith) read(br pgx.BatchResults) error {
	if s.scan == nil {
		_, err := br.Exec()
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	return s.scan(rows)
}

// newClaimTx starts the transaction of a claim on conn; nothing is sent before its first statement.
// With ahead not nil, the first round trip reads ahead: it carries the BEGIN, the first statement
// (the claim's first locks) and ahead's page, whose tickets are in ahead.tickets once the first
// statement's rows are closed.
func newClaimTx(conn *pgx.Conn, ahead *aheadPage) *claimTx {
	return &claimTx{conn: conn, ahead: ahead}
}

// Query runs sql in the transaction. The first runs in the round trip that begins the transaction and
// reads ahead (newClaimTx).
func (t *claimTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	if t.first != nil {
		b.Queue(t.first.sql, t.first.args...)
	}
	b.Queue(sql, args...)
	if t.ahead != nil {
		b.Queue(t.ahead.sql, t.ahead.args...)
	}
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	if t.first != nil {
		if err := t.first.read(br); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, t: t, br: br}, nil
}

// batchRows are the rows of the first round trip's query: closing them reads the page sent after it,
// if any, and closes the batch, so that the connection is free for the next statement.
type batchRows struct {
	pgx.Rows
	t   *claimTx
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	if r.br == nil {
		return
	}
	r.Rows.Close()
	if r.Rows.Err() == nil && r.t.ahead != nil {
		r.t.ahead.tickets, r.err = collectTickets(r.br.Query())
	}
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
	r.br = nil
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// commitWith runs sql, when not empty, and commits, in one round trip, calling scan on each row sql
// returns. Like InTx's commit, it is not cancelled with ctx once sent, but bounded: a COMMIT
// interrupted by the caller's cancellation may have committed on the server while the caller hears an
// error, and the claimer acts on the answer. A ctx already done rolls back instead.
func (t *claimTx) commitWith(ctx context.Context, scan func(pgx.Rows) error, sql string, args ...any) error {
	if !t.begun || ctx.Err() != nil {
		return ctx.Err()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	b := &pgx.Batch{}
	if sql != "" {
		b.Queue(sql, args...)
	}
	if t.last != nil {
		b.Queue(t.last.sql, t.last.args...)
	}
	b.Queue("commit")
	br := t.conn.SendBatch(cctx, b)
	defer br.Close()
	// From here the COMMIT is on its way: an error other than the server's own answer leaves the
	// outcome unknown (commitError).
	if sql != "" {
		rows, err := br.Query()
		if err != nil {
			return commitError(err)
		}
		// A row that does not scan is dropped, not an error: the COMMIT is sent already, and the
		// answer must be the COMMIT's (the rows are figures, such as queue depths).
		for rows.Next() && scan(rows) == nil {
		}
		if rows.Close(); rows.Err() != nil {
			return commitError(rows.Err())
		}
	}
	if t.last != nil {
		if err := t.last.read(br); err != nil {
			return commitError(err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return commitError(err)
	}
	if tag.String() != "COMMIT" {
		// The server answers COMMIT with ROLLBACK for a transaction that failed: never a success.
		return fmt.Errorf("sluice: the transaction was rolled back at its commit (%s)", tag)
	}
	t.done = true
	return commitError(br.Close())
}

// rollback ends a transaction that did not commit. A connection left in a transaction (the rollback
// failed) is closed by the pool when it is released, never reused.
func (t *claimTx) rollback(ctx context.Context) {
	if t.begun && !t.done {
		t.done = true
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "rollback")
	}
}
