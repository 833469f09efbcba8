-- Releases not yet applied to their limit row. A completion appends here instead of locking the
-- limit row, so that finishing work never makes claimers on the same key skip it or wait; the next
-- claim that holds the row folds the pending releases into it (and deletes them) before it decides.
-- A row is the sum over the tickets one completion released: how many, the tokens they had reserved,
-- and the unused part of the reservations whose usage was reported (negative: usage above them).
CREATE TABLE sluice_release (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text             NOT NULL,
    count       integer          NOT NULL CHECK (count >= 0),
    reserved    bigint           NOT NULL CHECK (reserved >= 0),
    refund      double precision NOT NULL,
    released_at timestamptz      NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

CREATE INDEX sluice_release_key ON sluice_release (key);
