-- Allowances: windowed quotas of a limit beside its rates (throttle.Allowance), their state, and what
-- a provider's headers taught about them; a ticket's reservation in money; and the ledger that
-- reconciles allowances with reported usage in the window each ticket was admitted in.
--
-- allowances is the configured list (throttle.Allowances as JSON), NULL for none; learned_allowances
-- the amounts header learning lowered them to (same form), NULL when it learned none. allowance_state
-- is throttle.AllowanceStates as JSON: admission writes it beside the buckets, and it is in no index
-- and in no trigger's WHEN, so those updates stay HOT. Adding nullable columns rewrites nothing.
ALTER TABLE sluice_limit
    ADD COLUMN allowances         jsonb,
    ADD COLUMN allowance_state    jsonb,
    ADD COLUMN learned_allowances jsonb;

-- cost_money is the reservation in micro-units of the money allowances' currency (a price table's
-- estimate of the tokens); actual_money what the reported usage cost, NULL when not reported.
-- allowance_spend marks a ticket admitted on a limit with allowances: only its completion appends
-- to the allowance ledger (a completion of other tickets looks up no limit). Constant defaults
-- rewrite nothing.
ALTER TABLE sluice_ticket
    ADD COLUMN cost_money      bigint  NOT NULL DEFAULT 0 CHECK (cost_money >= 0),
    ADD COLUMN actual_money    bigint,
    ADD COLUMN allowance_spend boolean NOT NULL DEFAULT false;

-- The allowance ledger: a completion appends, for each limit with allowances that a ticket whose usage
-- was reported drew on, what the ticket reserved and what it used, summed per key and admission
-- instant (tickets one claim admitted share it), without locking the limit row; the next holder of the
-- row takes the rows and reconciles each in the window of its admitted_at (throttle
-- Limit.ReleaseSpend), as sluice_release's rows are folded into the buckets.
CREATE TABLE sluice_allowance_release (
    key             text        NOT NULL,
    admitted_at     timestamptz NOT NULL,
    reserved_input  bigint      NOT NULL,
    reserved_output bigint      NOT NULL,
    reserved_money  bigint      NOT NULL,
    actual_input    bigint      NOT NULL,
    actual_output   bigint      NOT NULL,
    actual_money    bigint      NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX sluice_allowance_release_key ON sluice_allowance_release (key);

-- The history records allowances with the rest of the configuration, and learned amounts with the
-- rest of what was learned: under throttle.Limit's JSON name "allowances", left out when NULL.
CREATE OR REPLACE FUNCTION sluice_limit_config(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('max_concurrent', l.max_concurrent, 'requests_per_second', l.requests_per_second,
        'burst', l.burst, 'tokens_per_minute', l.tokens_per_minute, 'token_burst', l.token_burst,
        'max_inflight_tokens', l.max_inflight_tokens,
        'input_tokens_per_minute', l.input_tokens_per_minute, 'input_token_burst', l.input_token_burst,
        'output_tokens_per_minute', l.output_tokens_per_minute, 'output_token_burst', l.output_token_burst)
        || jsonb_strip_nulls(jsonb_build_object('allowances', l.allowances))
$$;

CREATE OR REPLACE FUNCTION sluice_limit_learned(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('requests_per_second', coalesce(l.learned_requests_per_second, 0),
        'burst', coalesce(l.learned_burst, 0), 'tokens_per_minute', coalesce(l.learned_tokens_per_minute, 0),
        'token_burst', coalesce(l.learned_token_burst, 0),
        'input_tokens_per_minute', coalesce(l.learned_input_tokens_per_minute, 0),
        'input_token_burst', coalesce(l.learned_input_token_burst, 0),
        'output_tokens_per_minute', coalesce(l.learned_output_tokens_per_minute, 0),
        'output_token_burst', coalesce(l.learned_output_token_burst, 0))
        || jsonb_strip_nulls(jsonb_build_object('allowances', l.learned_allowances))
$$;

DROP TRIGGER sluice_limit_changed ON sluice_limit;
CREATE TRIGGER sluice_limit_changed AFTER UPDATE ON sluice_limit FOR EACH ROW
    WHEN ((OLD.max_concurrent, OLD.requests_per_second, OLD.burst, OLD.tokens_per_minute, OLD.token_burst,
            OLD.max_inflight_tokens, OLD.input_tokens_per_minute, OLD.input_token_burst,
            OLD.output_tokens_per_minute, OLD.output_token_burst, OLD.allowances)
        IS DISTINCT FROM (NEW.max_concurrent, NEW.requests_per_second, NEW.burst, NEW.tokens_per_minute, NEW.token_burst,
            NEW.max_inflight_tokens, NEW.input_tokens_per_minute, NEW.input_token_burst,
            NEW.output_tokens_per_minute, NEW.output_token_burst, NEW.allowances)
        OR (OLD.learned_requests_per_second, OLD.learned_burst, OLD.learned_tokens_per_minute, OLD.learned_token_burst,
            OLD.learned_input_tokens_per_minute, OLD.learned_input_token_burst,
            OLD.learned_output_tokens_per_minute, OLD.learned_output_token_burst, OLD.learned_allowances)
        IS DISTINCT FROM (NEW.learned_requests_per_second, NEW.learned_burst, NEW.learned_tokens_per_minute, NEW.learned_token_burst,
            NEW.learned_input_tokens_per_minute, NEW.learned_input_token_burst,
            NEW.learned_output_tokens_per_minute, NEW.learned_output_token_burst, NEW.learned_allowances))
    EXECUTE FUNCTION sluice_limit_record();
