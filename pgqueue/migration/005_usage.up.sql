-- What each key admitted, per second: the requests and the tokens reserved. A claim adds its
-- admissions in the statement that stores them, while it holds the rows of every key it admitted on,
-- so two claims never write one row at once. Operators' tools read it (the rate and tokens used over
-- the last minute, and their history); admission does not. Maintenance deletes rows older than an hour.
CREATE TABLE sluice_usage (
    key      text        NOT NULL,
    second   timestamptz NOT NULL,
    requests bigint      NOT NULL CHECK (requests >= 0),
    tokens   bigint      NOT NULL CHECK (tokens >= 0),
    PRIMARY KEY (key, second)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
