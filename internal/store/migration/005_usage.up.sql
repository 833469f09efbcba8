-- What each key admitted, per second: the requests, and the tokens reserved less what reported usage
-- gave back (folded in by a later claim, at its second: a second's tokens may be negative). A claim
-- adds these in the statement that stores its decisions, while it holds the rows of every key it
-- writes for, so two claims never write one row at once. Operators' tools read it (the rate and tokens
-- used over the last minute, and their history); admission does not. Maintenance deletes rows older
-- than an hour.
CREATE TABLE sluice_usage (
    key      text        NOT NULL,
    second   timestamptz NOT NULL,
    requests bigint      NOT NULL CHECK (requests >= 0),
    tokens   bigint      NOT NULL,
    PRIMARY KEY (key, second)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
