package engine

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// claimTx is the transaction of one claim, on a connection of its own. Its first statement is sent in
// one round trip with the BEGIN, its last with the COMMIT (pgx pipelines a batch), so that a claim
// costs the round trips of its statements only: the locks, a page per line, the writes.
type claimTx struct {
	conn  *pgx.Conn
	begun bool // the BEGIN has been sent
	done  bool // committed or rolled back
}

// Query runs sql in the transaction; the first runs with the BEGIN.
func (t *claimTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	t.begun = true
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return batchRows{rows, br}, nil
}

// batchRows are the rows of a batch's last query: closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r batchRows) Close() {
	r.Rows.Close()
	_ = r.br.Close()
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
	b.Queue("commit")
	br := t.conn.SendBatch(cctx, b)
	defer br.Close()
	if sql != "" {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				rows.Close()
				return err
			}
		}
		if rows.Close(); rows.Err() != nil {
			return rows.Err()
		}
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	t.done = true
	return br.Close()
}

// rollback ends a transaction that did not commit. A connection left in a transaction (the rollback
// failed) is closed by the pool when it is released, never reused.
func (t *claimTx) rollback(ctx context.Context) {
	if t.begun && !t.done {
		t.done = true
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "rollback")
	}
}
