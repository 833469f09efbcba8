-- Sluice's admission queue. Applied with search_path set to the configured schema.

-- One row per limit: its configuration (changed at runtime by an UPDATE) and its admission state.
-- Every admission for a key locks this row first (FOR UPDATE SKIP LOCKED), so decisions on one key are
-- serialised and limits on different keys never contend. The row is tiny and updated at every
-- admission batch and release: fillfactor leaves room for HOT updates, autovacuum runs on dead tuples
-- rather than on a share of a table that never grows.
CREATE TABLE sluice_limit (
    key                 text PRIMARY KEY,
    max_concurrent      integer          NOT NULL DEFAULT 0 CHECK (max_concurrent >= 0),
    requests_per_second double precision NOT NULL DEFAULT 0 CHECK (requests_per_second >= 0),
    burst               double precision NOT NULL DEFAULT 0 CHECK (burst >= 0),
    tokens_per_minute   double precision NOT NULL DEFAULT 0 CHECK (tokens_per_minute >= 0),
    token_burst         double precision NOT NULL DEFAULT 0 CHECK (token_burst >= 0),
    max_inflight_tokens bigint           NOT NULL DEFAULT 0 CHECK (max_inflight_tokens >= 0),
    -- State. A NULL bucket time means a full bucket.
    request_level       double precision NOT NULL DEFAULT 0,
    request_at          timestamptz,
    token_level         double precision NOT NULL DEFAULT 0,
    token_at            timestamptz,
    inflight_count      integer          NOT NULL DEFAULT 0,
    inflight_tokens     bigint           NOT NULL DEFAULT 0,
    paused_until        timestamptz,
    -- Fair-share virtual time: the start tag of the ticket admitted last.
    vtime               double precision NOT NULL DEFAULT 0,
    created_at          timestamptz      NOT NULL DEFAULT now(),
    updated_at          timestamptz      NOT NULL DEFAULT now()
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200,
        autovacuum_vacuum_cost_delay = 0);

-- One row per activity invocation waiting for, holding or just done with admission. Finished rows are
-- deleted once their outcome is delivered, so the table holds the live backlog only.
CREATE TABLE sluice_ticket (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state          text        NOT NULL CHECK (state IN ('queued', 'admitted', 'running', 'finished', 'returned')),
    -- The limit whose line the ticket waits in (the first of limit_keys); the others must have room too.
    line_key       text        NOT NULL,
    limit_keys     text[]      NOT NULL CHECK (cardinality(limit_keys) >= 1),
    cost           bigint      NOT NULL DEFAULT 0 CHECK (cost >= 0),
    actual_cost    bigint,
    priority       integer     NOT NULL DEFAULT 0,
    fairness_key   text        NOT NULL DEFAULT '',
    vstart         double precision NOT NULL DEFAULT 0,
    seq            bigint      NOT NULL,
    owner          text        NOT NULL,
    namespace      text        NOT NULL DEFAULT '',
    workflow_id    text        NOT NULL DEFAULT '',
    run_id         text        NOT NULL DEFAULT '',
    activity_id    text        NOT NULL DEFAULT '',
    activity_type  text        NOT NULL DEFAULT '',
    attempt        integer     NOT NULL DEFAULT 1,
    task_token     bytea,
    deadline       timestamptz,
    not_before     timestamptz NOT NULL DEFAULT '-infinity',
    enqueued_at    timestamptz NOT NULL DEFAULT now(),
    admitted_at    timestamptz,
    finished_at    timestamptz,
    wait_reason    text,
    outcome_kind   text,
    outcome        bytea,
    deliveries     integer     NOT NULL DEFAULT 0,
    deliver_after  timestamptz,
    trace_context  text,
    requeues       integer     NOT NULL DEFAULT 0
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
        autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);

-- The claim reads a line in order: an index scan, whatever the length of the queue.
CREATE INDEX sluice_ticket_line ON sluice_ticket (line_key, priority, vstart, seq) WHERE state = 'queued';
-- Owners pick up what was admitted for them; hand-back finds a dead owner's tickets.
CREATE INDEX sluice_ticket_owner ON sluice_ticket (owner, state);
-- Outcomes waiting for delivery to Temporal.
CREATE INDEX sluice_ticket_finished ON sluice_ticket (deliver_after, id) WHERE state = 'finished';
-- A retry finds the place of its earlier attempt.
CREATE INDEX sluice_ticket_activity ON sluice_ticket (namespace, workflow_id, activity_id);

CREATE SEQUENCE sluice_ticket_seq;

-- Fair share: the virtual finish tag of each fairness key within a line.
CREATE TABLE sluice_fair (
    line_key     text             NOT NULL,
    fairness_key text             NOT NULL,
    finish       double precision NOT NULL,
    updated_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (line_key, fairness_key)
) WITH (fillfactor = 70);

-- Live processes and their leases. A process whose lease has expired is dead: its tickets are handed
-- back to Temporal by any survivor.
CREATE TABLE sluice_owner (
    id               text PRIMARY KEY,
    lease_expires_at timestamptz NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    info             text        NOT NULL DEFAULT ''
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);
