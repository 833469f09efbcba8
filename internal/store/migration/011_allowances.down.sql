DROP TRIGGER IF EXISTS sluice_limit_changed ON sluice_limit;
CREATE OR REPLACE FUNCTION sluice_limit_config(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('max_concurrent', l.max_concurrent, 'requests_per_second', l.requests_per_second,
        'burst', l.burst, 'tokens_per_minute', l.tokens_per_minute, 'token_burst', l.token_burst,
        'max_inflight_tokens', l.max_inflight_tokens,
        'input_tokens_per_minute', l.input_tokens_per_minute, 'input_token_burst', l.input_token_burst,
        'output_tokens_per_minute', l.output_tokens_per_minute, 'output_token_burst', l.output_token_burst)
$$;
CREATE OR REPLACE FUNCTION sluice_limit_learned(l sluice_limit) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('requests_per_second', coalesce(l.learned_requests_per_second, 0),
        'burst', coalesce(l.learned_burst, 0), 'tokens_per_minute', coalesce(l.learned_tokens_per_minute, 0),
        'token_burst', coalesce(l.learned_token_burst, 0),
        'input_tokens_per_minute', coalesce(l.learned_input_tokens_per_minute, 0),
        'input_token_burst', coalesce(l.learned_input_token_burst, 0),
        'output_tokens_per_minute', coalesce(l.learned_output_tokens_per_minute, 0),
        'output_token_burst', coalesce(l.learned_output_token_burst, 0))
$$;
CREATE TRIGGER sluice_limit_changed AFTER UPDATE ON sluice_limit FOR EACH ROW
    WHEN ((OLD.max_concurrent, OLD.requests_per_second, OLD.burst, OLD.tokens_per_minute, OLD.token_burst,
            OLD.max_inflight_tokens, OLD.input_tokens_per_minute, OLD.input_token_burst,
            OLD.output_tokens_per_minute, OLD.output_token_burst)
        IS DISTINCT FROM (NEW.max_concurrent, NEW.requests_per_second, NEW.burst, NEW.tokens_per_minute, NEW.token_burst,
            NEW.max_inflight_tokens, NEW.input_tokens_per_minute, NEW.input_token_burst,
            NEW.output_tokens_per_minute, NEW.output_token_burst)
        OR (OLD.learned_requests_per_second, OLD.learned_burst, OLD.learned_tokens_per_minute, OLD.learned_token_burst,
            OLD.learned_input_tokens_per_minute, OLD.learned_input_token_burst,
            OLD.learned_output_tokens_per_minute, OLD.learned_output_token_burst)
        IS DISTINCT FROM (NEW.learned_requests_per_second, NEW.learned_burst, NEW.learned_tokens_per_minute, NEW.learned_token_burst,
            NEW.learned_input_tokens_per_minute, NEW.learned_input_token_burst,
            NEW.learned_output_tokens_per_minute, NEW.learned_output_token_burst))
    EXECUTE FUNCTION sluice_limit_record();
DROP TABLE IF EXISTS sluice_allowance_release;
ALTER TABLE sluice_ticket DROP COLUMN IF EXISTS allowance_spend, DROP COLUMN IF EXISTS actual_money,
    DROP COLUMN IF EXISTS cost_money;
ALTER TABLE sluice_limit DROP COLUMN IF EXISTS learned_allowances, DROP COLUMN IF EXISTS allowance_state,
    DROP COLUMN IF EXISTS allowances;
