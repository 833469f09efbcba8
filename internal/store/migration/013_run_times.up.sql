-- How long completed runs held their limits, for the wait estimate (Explain): a row per key and
-- completion batch, with the run time of each run of the batch that drew on the key (from its admission
-- to its completion, in milliseconds, at most 2^31-1). Explain takes the run-time distribution of a
-- key from its recent rows, rather than by Little's law over a window that may hold an idle spell.
-- Completions append (CompleteMany, one statement per batch); nothing updates a row; maintenance deletes
-- rows older than an hour (UsageHistory). A new table: safe while older replicas run (they write no
-- rows, and Explain then knows less).
CREATE TABLE sluice_run_time (
    key      text        NOT NULL,
    ended_at timestamptz NOT NULL,
    run_ms   integer[]   NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX sluice_run_time_key ON sluice_run_time (key, ended_at);
